//! Catalog auth against a front that checks it: an HTTP proxy before Apache's REST
//! fixture (which checks no tokens) that issues OAuth2 tokens, refuses requests without
//! a valid one (401), can revoke every token, and records the headers it saw.

mod support;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use floe::config::Config;
use floe::writer::{Message, Writer};
use serde_json::json;
use support::{merge, read_request, runtime, services};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CLIENT_ID: &str = "floe";
const CLIENT_SECRET: &str = "client-SECRET-value";
/// Advertised lifetime: floe refreshes half a short-lived token's life (at most 30 s)
/// before it expires, so after 1.5 s.
const TOKEN_SECONDS: u64 = 3;

#[derive(Default)]
struct FrontState {
    /// Valid tokens and when they expire.
    tokens: Vec<(String, Instant)>,
    issued: usize,
    refused: usize,
    /// The `scope` of every token request.
    scopes: Vec<Option<String>>,
    /// Every request's value of the `X-Floe-Test` header (`None` when missing).
    extra_headers: Vec<Option<String>>,
}

struct AuthFront {
    url: String,
    state: Arc<Mutex<FrontState>>,
}

impl AuthFront {
    async fn start(upstream: String) -> AuthFront {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(FrontState::default()));
        let shared = state.clone();
        let upstream = upstream.trim_start_matches("http://").to_string();
        tokio::spawn(async move {
            loop {
                let (client, _) = listener.accept().await.unwrap();
                let (state, upstream) = (shared.clone(), upstream.clone());
                tokio::spawn(async move {
                    let _ = serve(client, &upstream, &state).await;
                });
            }
        });
        AuthFront { url, state }
    }

    fn revoke_all(&self) {
        self.state.lock().unwrap().tokens.clear();
    }
}

fn header<'a>(request: &'a str, name: &str) -> Option<&'a str> {
    request.split("\r\n\r\n").next()?.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

async fn answer(
    client: &mut tokio::net::TcpStream,
    status: &str,
    body: &str,
) -> std::io::Result<()> {
    let text = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    client.write_all(text.as_bytes()).await
}

async fn serve(
    mut client: tokio::net::TcpStream,
    upstream: &str,
    state: &Mutex<FrontState>,
) -> std::io::Result<()> {
    let (first_line, request) = read_request(&mut client).await?;
    let text = String::from_utf8_lossy(&request).to_string();
    if first_line.starts_with("POST /v1/oauth/tokens") {
        let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
        let form: Vec<(String, String)> = url::form_urlencoded::parse(body.as_bytes())
            .into_owned()
            .collect();
        let field = |k: &str| form.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        if field("client_id") != Some(CLIENT_ID) || field("client_secret") != Some(CLIENT_SECRET) {
            return answer(
                &mut client,
                "401 Unauthorized",
                r#"{"error": "invalid_client"}"#,
            )
            .await;
        }
        let token = {
            let mut s = state.lock().unwrap();
            s.scopes.push(field("scope").map(str::to_string));
            s.issued += 1;
            let token = format!("tok-{}", s.issued);
            let expires = Instant::now() + Duration::from_secs(TOKEN_SECONDS);
            s.tokens.push((token.clone(), expires));
            token
        };
        let body = format!(
            r#"{{"access_token": "{token}", "token_type": "bearer", "expires_in": {TOKEN_SECONDS}, "issued_token_type": "urn:ietf:params:oauth:token-type:access_token"}}"#
        );
        return answer(&mut client, "200 OK", &body).await;
    }
    let valid = {
        let mut s = state.lock().unwrap();
        s.extra_headers
            .push(header(&text, "X-Floe-Test").map(str::to_string));
        let presented = header(&text, "Authorization").and_then(|v| v.strip_prefix("Bearer "));
        let now = Instant::now();
        let ok = presented.is_some_and(|t| s.tokens.iter().any(|(v, exp)| v == t && *exp > now));
        if !ok {
            s.refused += 1;
        }
        ok
    };
    if !valid {
        let body = r#"{"error": {"message": "missing or expired token", "type": "NotAuthorizedException", "code": 401}}"#;
        return answer(&mut client, "401 Unauthorized", body).await;
    }
    let mut up = tokio::net::TcpStream::connect(upstream).await?;
    up.write_all(&request).await?;
    let mut response = Vec::new();
    up.read_to_end(&mut response).await?;
    client.write_all(&response).await
}

fn config(front: &AuthFront, table: &str) -> Config {
    let mut c = services().floe_config();
    merge(
        &mut c,
        json!({
            "catalog": {
                "url": front.url,
                "auth": {"oauth2": {"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET, "scope": "catalog"}},
                "headers": {"X-Floe-Test": "header-SECRET-1"}
            },
            "namespace": "e2e_auth", "table": table,
            "schema_evolution": {"enabled": true}
        }),
    );
    Config::from_json(&c.to_string()).unwrap()
}

fn write(rt: &tokio::runtime::Runtime, writer: &Writer, id: i64) {
    let text = format!(r#"{{"id": {id}}}"#);
    let out = rt
        .block_on(writer.write_batch(&[Message::insert(text.as_bytes())]))
        .expect("write call");
    assert!(out.failures[0].is_none(), "{:?}", out.failures);
}

/// Regression (reliability issue, item 14): the OAuth2 test ran against a fixture that
/// checks no tokens. Here every catalog call needs a valid token: floe fetches one,
/// refreshes it before it expires and again when the catalog answers 401, and sends the
/// extra headers on every call.
#[test]
fn tokens_are_checked_refreshed_before_expiry_and_after_a_401() {
    let rt = runtime();
    let front = rt.block_on(AuthFront::start(services().rest_url.clone()));
    let writer = rt.block_on(Writer::open(config(&front, "tokens"))).unwrap();
    write(&rt, &writer, 1);
    let issued_first = front.state.lock().unwrap().issued;
    assert!(issued_first >= 1);
    // Past the refresh point (3 s lifetime, refreshed 1.5 s early) but before expiry: a
    // new token, fetched before any call was refused.
    std::thread::sleep(Duration::from_millis(2_000));
    write(&rt, &writer, 2);
    let (issued_after_expiry, refused) = {
        let s = front.state.lock().unwrap();
        (s.issued, s.refused)
    };
    assert!(
        issued_after_expiry > issued_first,
        "no refresh before expiry: {issued_first} → {issued_after_expiry} tokens"
    );
    assert_eq!(refused, 0, "a call went out with an expired token");
    // The catalog forgets every token: the next call is refused once, floe fetches a new
    // token and the write goes through.
    front.revoke_all();
    let refused_before = front.state.lock().unwrap().refused;
    write(&rt, &writer, 3);
    let s = front.state.lock().unwrap();
    assert!(
        s.refused > refused_before,
        "the revoked token was never refused"
    );
    assert!(s.issued > issued_after_expiry, "no new token after the 401");
    assert!(
        s.extra_headers
            .iter()
            .all(|h| h.as_deref() == Some("header-SECRET-1")),
        "a catalog call lacked the extra header: {:?}",
        s.extra_headers
    );
    let distinct: HashSet<_> = s.extra_headers.iter().collect();
    assert_eq!(distinct.len(), 1);
    assert!(
        s.scopes.iter().all(|sc| sc.as_deref() == Some("catalog")),
        "a token request lacked the configured scope: {:?}",
        s.scopes
    );
    println!(
        "{} catalog calls, {} tokens issued, {} refused",
        s.extra_headers.len(),
        s.issued,
        s.refused
    );
}

/// A catalog that refuses the client's credentials: a clear error naming the token
/// request, with neither the client secret nor the extra header's value in it.
#[test]
fn refused_credentials_are_a_clear_error_without_secrets() {
    let rt = runtime();
    let front = rt.block_on(AuthFront::start(services().rest_url.clone()));
    let mut c = serde_json::to_value(json!({})).unwrap();
    merge(&mut c, services().floe_config());
    merge(
        &mut c,
        json!({"catalog": {"url": front.url,
            "auth": {"oauth2": {"client_id": "someone-else", "client_secret": CLIENT_SECRET}},
            "headers": {"X-Floe-Test": "header-SECRET-1"}}}),
    );
    let cfg = Config::from_json(&c.to_string()).unwrap();
    let err = rt.block_on(Writer::open(cfg)).err().expect("refused");
    let text = err.to_string();
    assert!(text.contains("OAuth2 token request"), "{text}");
    assert!(text.contains("401"), "{text}");
    assert!(!text.contains("SECRET"), "{text}");
    // Nor in the config's Debug form (what a log line would print).
    let cfg = config(&front, "debug");
    let debug = format!("{cfg:?}");
    assert!(!debug.contains("SECRET"), "{debug}");
}
