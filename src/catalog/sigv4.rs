//! AWS Signature Version 4 for catalog requests (`catalog.auth.aws_sigv4`): the Iceberg
//! REST endpoints of AWS Glue (`glue`), S3 Tables (`s3tables`) and API Gateway
//! (`execute-api`) take no token but a signature over each request.
//!
//! Each request is signed after it is built and before it is sent: the canonical request
//! (method, path, query, the signed headers, the payload's SHA-256), the string to sign
//! over its hash, and a key derived from the secret by date, region and service. As the
//! AWS SDKs do for every service but S3, the path is URI-encoded a second time (an
//! Iceberg namespace path already carries `%1F`, signed as `%251F`). The payload hash is
//! also sent as `x-amz-content-sha256`, as Iceberg's Java signer does.
//!
//! Credentials: the configured key, else the AWS SDKs' default chain (see `aws_chain`).

use std::fmt::Write as _;
use std::time::SystemTime;

use chrono::{DateTime, Utc};
use ring::{digest, hmac};

use crate::error::{Error, Result};

/// A key pair, and the session token of temporary credentials.
#[derive(Clone)]
pub struct Credentials {
    pub id: String,
    pub secret: String,
    pub token: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("id", &self.id)
            .field("secret", &"<redacted>")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

pub(super) fn from_env(var: impl Fn(&str) -> Option<String>) -> Option<Credentials> {
    let id = var("AWS_ACCESS_KEY_ID").filter(|s| !s.is_empty())?;
    let secret = var("AWS_SECRET_ACCESS_KEY").filter(|s| !s.is_empty())?;
    let token = var("AWS_SESSION_TOKEN").filter(|s| !s.is_empty());
    Some(Credentials { id, secret, token })
}

/// A profile's keys from the INI text of `~/.aws/credentials`.
pub(super) fn from_shared_file(text: &str, profile: &str) -> Option<Credentials> {
    let mut in_profile = false;
    let (mut id, mut secret, mut token) = (None, None, None);
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            in_profile = name.trim() == profile;
            continue;
        }
        if !in_profile {
            continue;
        }
        if let Some((key, value)) = line.split_once('=') {
            let value = value.trim().to_string();
            match key.trim() {
                "aws_access_key_id" => id = Some(value),
                "aws_secret_access_key" => secret = Some(value),
                "aws_session_token" => token = Some(value),
                _ => {}
            }
        }
    }
    Some(Credentials {
        id: id?,
        secret: secret?,
        token,
    })
}

/// Signs requests for one region and service.
#[derive(Debug, Clone)]
pub struct Signer {
    pub region: String,
    pub service: String,
    pub credentials: Credentials,
}

impl Signer {
    /// Adds `x-amz-date`, `x-amz-content-sha256`, `x-amz-security-token` (temporary
    /// credentials) and `authorization` to a built request.
    pub fn sign(&self, request: &mut reqwest::Request, now: SystemTime) -> Result<()> {
        let body: &[u8] = match request.body() {
            None => &[],
            Some(b) => b.as_bytes().ok_or_else(|| {
                Error::internal("a streamed request body cannot be signed with SigV4")
            })?,
        };
        let url = request.url().clone();
        let host = match (url.host_str(), url.port()) {
            (Some(h), Some(p)) => format!("{h}:{p}"),
            (Some(h), None) => h.to_string(),
            (None, _) => return Err(Error::internal("a catalog URL without a host")),
        };
        let content_type = request
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let signed = self.signature_headers(
            request.method().as_str(),
            &url,
            &host,
            content_type.as_deref(),
            body,
            now.into(),
        );
        for (name, value) in signed {
            let value = reqwest::header::HeaderValue::from_str(&value).map_err(|_| {
                Error::config("catalog.auth.aws_sigv4: a credential is not valid in an HTTP header")
            })?;
            request.headers_mut().insert(name, value);
        }
        Ok(())
    }

    /// The headers to add: (lower-case name, value).
    fn signature_headers(
        &self,
        method: &str,
        url: &url::Url,
        host: &str,
        content_type: Option<&str>,
        body: &[u8],
        now: DateTime<Utc>,
    ) -> Vec<(&'static str, String)> {
        let amz_date = now.format("%Y%m%dT%H%M%SZ").to_string();
        let date = &amz_date[..8];
        let payload_hash = hex(digest::digest(&digest::SHA256, body).as_ref());
        let mut headers: Vec<(&'static str, String)> = vec![
            ("host", host.to_string()),
            ("x-amz-content-sha256", payload_hash.clone()),
            ("x-amz-date", amz_date.clone()),
        ];
        if let Some(ct) = content_type {
            headers.push(("content-type", ct.to_string()));
        }
        if let Some(token) = &self.credentials.token {
            headers.push(("x-amz-security-token", token.clone()));
        }
        headers.sort_by_key(|(name, _)| *name);
        let signed_headers = headers
            .iter()
            .map(|(n, _)| *n)
            .collect::<Vec<_>>()
            .join(";");
        let canonical = canonical_request(method, url, &headers, &signed_headers, &payload_hash);
        let scope = format!("{date}/{}/{}/aws4_request", self.region, self.service);
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
            hex(digest::digest(&digest::SHA256, canonical.as_bytes()).as_ref())
        );
        let key = signing_key(&self.credentials.secret, date, &self.region, &self.service);
        let signature =
            hex(hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &key), to_sign.as_bytes()).as_ref());
        let authorization = format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed_headers}, Signature={signature}",
            self.credentials.id
        );
        headers.retain(|(name, _)| *name != "host" && *name != "content-type");
        headers.push(("authorization", authorization));
        headers
    }
}

/// The canonical request: method, doubly encoded path, sorted encoded query, the signed
/// headers (name:value lines, sorted), their names, the payload hash.
fn canonical_request(
    method: &str,
    url: &url::Url,
    headers: &[(&str, String)],
    signed_headers: &str,
    payload_hash: &str,
) -> String {
    let path = match url.path() {
        "" => "/".to_string(),
        p => uri_encode(p, false),
    };
    let mut query: Vec<(String, String)> = url
        .query_pairs()
        .map(|(k, v)| (uri_encode(&k, true), uri_encode(&v, true)))
        .collect();
    query.sort();
    let query = query
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&");
    let mut canonical_headers = String::new();
    for (name, value) in headers {
        let _ = writeln!(canonical_headers, "{name}:{}", value.trim());
    }
    format!("{method}\n{path}\n{query}\n{canonical_headers}\n{signed_headers}\n{payload_hash}")
}

/// RFC 3986 percent-encoding of everything but unreserved characters (and `/` unless
/// `slash` is encoded too), upper-case hex, as SigV4 asks.
fn uri_encode(text: &str, encode_slash: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b'/' if !encode_slash => out.push('/'),
            _ => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
    out
}

/// The key for one day, region and service, derived from the secret by HMAC chaining.
fn signing_key(secret: &str, date: &str, region: &str, service: &str) -> Vec<u8> {
    let step = |key: &[u8], data: &str| {
        hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data.as_bytes())
            .as_ref()
            .to_vec()
    };
    let k_date = step(format!("AWS4{secret}").as_bytes(), date);
    let k_region = step(&k_date, region);
    let k_service = step(&k_region, service);
    step(&k_service, "aws4_request")
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example_signer(token: Option<&str>) -> Signer {
        Signer {
            region: "us-east-1".into(),
            service: "service".into(),
            credentials: Credentials {
                id: "AKIDEXAMPLE".into(),
                secret: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
                token: token.map(str::to_string),
            },
        }
    }

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().into()
    }

    #[test]
    fn the_signing_key_matches_awss_published_example() {
        // AWS's documented derivation example (the example secret, 20150830, us-east-1, iam).
        let key = signing_key(
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            "20150830",
            "us-east-1",
            "iam",
        );
        assert_eq!(
            hex(&key),
            "c4afb1cc5771d871763a393e44b703571b55cc28424d1a5e86da6ed3c154a4b9"
        );
    }

    #[test]
    fn paths_are_encoded_twice_and_queries_sorted() {
        let url = url::Url::parse("http://h/v1/namespaces/a%1Fb/tables?b=2&a=x%20y").unwrap();
        let c = canonical_request("GET", &url, &[("host", "h".into())], "host", "e3b0");
        let lines: Vec<&str> = c.lines().collect();
        assert_eq!(lines[1], "/v1/namespaces/a%251Fb/tables");
        assert_eq!(lines[2], "a=x%20y&b=2");
        assert_eq!(lines[3], "host:h");
    }

    #[test]
    fn a_signature_names_its_headers_and_changes_with_the_body() {
        let url =
            url::Url::parse("https://glue.us-east-1.amazonaws.com/iceberg/v1/config").unwrap();
        let now = at("2015-08-30T12:36:00Z");
        let s = example_signer(Some("session"));
        let a = s.signature_headers(
            "POST",
            &url,
            "glue.us-east-1.amazonaws.com",
            Some("application/json"),
            b"{}",
            now,
        );
        let b = s.signature_headers(
            "POST",
            &url,
            "glue.us-east-1.amazonaws.com",
            Some("application/json"),
            b"{ }",
            now,
        );
        let auth = |h: &[(&str, String)]| {
            h.iter()
                .find(|(n, _)| *n == "authorization")
                .unwrap()
                .1
                .clone()
        };
        assert!(auth(&a).starts_with(
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
             SignedHeaders=content-type;host;x-amz-content-sha256;x-amz-date;x-amz-security-token, Signature="
        ), "{}", auth(&a));
        assert_ne!(auth(&a), auth(&b));
        assert!(
            a.iter()
                .any(|(n, v)| *n == "x-amz-security-token" && v == "session")
        );
        assert!(
            a.iter()
                .any(|(n, v)| *n == "x-amz-date" && v == "20150830T123600Z")
        );
    }

    #[test]
    fn get_vanilla_from_awss_test_suite() {
        // aws-sig-v4-test-suite "get-vanilla": its canonical request and signature.
        let url = url::Url::parse("https://example.amazonaws.com/").unwrap();
        let headers = vec![
            ("host", "example.amazonaws.com".to_string()),
            ("x-amz-date", "20150830T123600Z".to_string()),
        ];
        let empty = hex(digest::digest(&digest::SHA256, b"").as_ref());
        let c = canonical_request("GET", &url, &headers, "host;x-amz-date", &empty);
        assert_eq!(
            c,
            "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n\
             e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n{}",
            hex(digest::digest(&digest::SHA256, c.as_bytes()).as_ref())
        );
        let key = signing_key(
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            "20150830",
            "us-east-1",
            "service",
        );
        let signature = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &key), to_sign.as_bytes());
        assert_eq!(
            hex(signature.as_ref()),
            "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
        );
    }

    #[test]
    fn credentials_come_from_the_environment_or_the_shared_file() {
        let env = |k: &str| match k {
            "AWS_ACCESS_KEY_ID" => Some("AKID".to_string()),
            "AWS_SECRET_ACCESS_KEY" => Some("SECRET".to_string()),
            _ => None,
        };
        let c = from_env(env).unwrap();
        assert_eq!((c.id.as_str(), c.token), ("AKID", None));
        assert!(from_env(|_| None).is_none());
        let file = "[default]\naws_access_key_id = A\naws_secret_access_key = B\n\n\
                    [prod]\naws_access_key_id=P\naws_secret_access_key=Q\naws_session_token=T\n";
        let p = from_shared_file(file, "prod").unwrap();
        assert_eq!(
            (p.id.as_str(), p.secret.as_str(), p.token.as_deref()),
            ("P", "Q", Some("T"))
        );
        assert_eq!(from_shared_file(file, "default").unwrap().id, "A");
        assert!(from_shared_file(file, "missing").is_none());
        assert!(!format!("{p:?}").contains('Q'), "secrets stay out of Debug");
    }
}
