//! floe's Iceberg REST catalog client: a thin layer over reqwest (rustls).
//!
//! It reuses iceberg-catalog-rest's serde types but posts commits itself, so snapshot
//! kinds the stock client lacks need no fork, and it classifies every failure so the
//! committer knows whether to retry, rebuild, or look for its commit id (5xx on commit
//! means the outcome is unknown). Tokens never appear in errors.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use iceberg::{NamespaceIdent, TableIdent, TableRequirement, TableUpdate};
use iceberg_catalog_rest::{
    CommitTableRequest, CommitTableResponse, CreateTableRequest, LoadTableResult,
};
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::Deserialize;
use tokio::sync::Mutex;

use super::answer::{AnswerHead, apply_updates, refs_after};
use super::aws_chain::CredentialSource;
use super::sigv4::Signer;
use super::{Catalog, LoadedTable, NewTable};
use crate::config::{CatalogConfig, OAuth2Config, SigV4Config, redact_user_info};
use crate::error::{Error, ErrorKind, Result};
use crate::sync::LockExt;

pub struct RestCatalog {
    http: reqwest::Client,
    /// Strings that must never appear in an error: tokens, client secrets, header values.
    secrets: Secrets,
    /// Base URL plus `/v1` and the server's prefix, without a trailing slash.
    base: String,
    url: String,
    auth: Auth,
    warehouse: Option<String>,
    /// Unity Catalog (by its endpoint's path): it refuses identifier-field ids when a
    /// table is created, and its readers apply no delete files.
    unity: bool,
}

/// The path of Unity Catalog's Iceberg REST endpoint (Databricks).
const UNITY_PATH: &str = "/api/2.1/unity-catalog/iceberg-rest";

enum Auth {
    None,
    Bearer(String),
    /// Each request is signed (see `sigv4`), after it is built, with the credentials the
    /// source holds then (see `aws_chain`).
    SigV4 {
        region: String,
        service: String,
        credentials: CredentialSource,
    },
    OAuth2 {
        config: OAuth2Config,
        /// The token, and when to fetch the next one (before it expires).
        token: Mutex<Option<(String, Instant)>>,
    },
}

#[derive(Deserialize)]
struct ConfigResponse {
    #[serde(default)]
    overrides: HashMap<String, String>,
    #[serde(default)]
    defaults: HashMap<String, String>,
}

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    expires_in: Option<u64>,
}

/// The CA certificates of `catalog.tls_root_cas_file`.
pub(crate) fn root_cas(path: &str) -> Result<Vec<reqwest::Certificate>> {
    let what = "catalog.tls_root_cas_file";
    let pem = std::fs::read(path)
        .map_err(|e| Error::config(format!("{what}: cannot read {path}: {e}")))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem)
        .map_err(|e| Error::config(format!("{what}: {path} is not a PEM bundle: {e}")))?;
    if certs.is_empty() {
        return Err(Error::config(format!(
            "{what}: {path} holds no PEM certificate"
        )));
    }
    Ok(certs)
}

/// How long before an OAuth2 token expires floe fetches the next: 30 s, or half the
/// life of short-lived tokens (a fresh token per call would double the calls).
fn token_margin(lifetime: Duration) -> Duration {
    (lifetime / 2).min(Duration::from_secs(30))
}

/// Namespace levels joined by the unit separator, as the REST spec asks, URL-encoded.
fn encode_namespace(ns: &NamespaceIdent) -> String {
    let joined = ns.as_ref().join("\u{1f}");
    url::form_urlencoded::byte_serialize(joined.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

/// The header that asks a catalog to vend storage credentials with each table it
/// loads (catalogs that cannot ignore it, and floe uses the configured keys). A
/// `catalog.headers` entry of the same name replaces it; an empty one removes it.
const ACCESS_DELEGATION: &str = "x-iceberg-access-delegation";

fn ask_for_vended_credentials(headers: &mut reqwest::header::HeaderMap) {
    match headers.get(ACCESS_DELEGATION) {
        None => {
            headers.insert(
                ACCESS_DELEGATION,
                reqwest::header::HeaderValue::from_static("vended-credentials"),
            );
        }
        Some(v) if v.is_empty() => {
            headers.remove(ACCESS_DELEGATION);
        }
        Some(_) => {}
    }
}

fn encode_segment(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

impl RestCatalog {
    /// Connects: builds the HTTP client, gets a token if configured, and asks
    /// `/v1/config` for the prefix to use.
    pub async fn connect(url: &str, config: &CatalogConfig) -> Result<Self> {
        let mut headers = reqwest::header::HeaderMap::new();
        for (k, v) in &config.headers {
            let name = reqwest::header::HeaderName::from_bytes(k.as_bytes()).map_err(|_| {
                Error::config(format!("catalog.headers: {k:?} is not a header name"))
            })?;
            let value = reqwest::header::HeaderValue::from_str(v).map_err(|_| {
                Error::config(format!("catalog.headers: value of {k:?} is not valid"))
            })?;
            headers.insert(name, value);
        }
        ask_for_vended_credentials(&mut headers);
        let secrets = Secrets::default();
        config.headers.values().for_each(|v| secrets.add(v));
        if let Some(token) = &config.auth.bearer {
            secrets.add(token);
        }
        if let Some(o) = &config.auth.oauth2 {
            secrets.add(&o.client_secret);
        }
        if let Some(password) = url::Url::parse(url)
            .ok()
            .and_then(|u| u.password().map(str::to_string))
        {
            secrets.add(&password);
        }
        let mut builder = reqwest::Client::builder();
        if let Some(path) = &config.tls_root_cas_file {
            for ca in root_cas(path)? {
                builder = builder.add_root_certificate(ca);
            }
        }
        let http = builder
            .default_headers(headers)
            // A redirected commit would be answered by the GET that follows it: a table,
            // which reads as a successful commit. Redirects are errors instead.
            .redirect(reqwest::redirect::Policy::none())
            .danger_accept_invalid_certs(config.tls_skip_verify)
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| Error::config(format!("cannot build HTTP client: {e}")))?;
        let auth = match (
            &config.auth.bearer,
            &config.auth.oauth2,
            &config.auth.aws_sigv4,
        ) {
            (Some(token), None, None) => Auth::Bearer(token.clone()),
            (None, Some(o), None) => Auth::OAuth2 {
                config: o.clone(),
                token: Mutex::new(None),
            },
            (None, None, Some(s)) => sigv4_auth(s).await?,
            (None, None, None) => Auth::None,
            _ => {
                return Err(Error::config(
                    "catalog.auth: set one of bearer, oauth2 and aws_sigv4",
                ));
            }
        };
        let mut catalog = RestCatalog {
            http,
            secrets,
            base: format!("{url}/v1"),
            url: url.to_string(),
            auth,
            warehouse: config.warehouse.clone(),
            unity: url.trim_end_matches('/').ends_with(UNITY_PATH),
        };
        if catalog.unity {
            tracing::info!(
                "the catalog is Unity Catalog: tables are created without identifier-field ids \
                 (floe upserts by identifier_fields), and upserts and deletes are copy-on-write"
            );
        }
        let mut path = format!("{url}/v1/config");
        if let Some(w) = &catalog.warehouse {
            path.push_str(&format!("?warehouse={}", encode_segment(w)));
        }
        let cfg: ConfigResponse = catalog
            .redacted(async {
                let response = catalog.send(Method::GET, &path, None::<&()>).await?;
                let response = expect_ok(response, "get catalog config").await?;
                parse_json(response, "catalog config").await
            })
            .await?;
        let mut props = cfg.defaults;
        props.extend(cfg.overrides);
        if let Some(prefix) = props.get("prefix").filter(|p| !p.is_empty()) {
            catalog.base = format!("{url}/v1/{}", prefix.trim_matches('/'));
        }
        Ok(catalog)
    }

    async fn token(&self, force_refresh: bool) -> Result<Option<String>> {
        match &self.auth {
            Auth::None | Auth::SigV4 { .. } => Ok(None),
            Auth::Bearer(t) => Ok(Some(t.clone())),
            Auth::OAuth2 { config, token } => {
                let mut cached = token.lock().await;
                if let Some((t, refresh_at)) = cached.as_ref()
                    && !force_refresh
                    && Instant::now() < *refresh_at
                {
                    return Ok(Some(t.clone()));
                }
                let fresh = self.fetch_token(config).await?;
                self.secrets.add(&fresh.0);
                *cached = Some(fresh.clone());
                Ok(Some(fresh.0))
            }
        }
    }

    async fn fetch_token(&self, config: &OAuth2Config) -> Result<(String, Instant)> {
        let uri = if config.server_uri.starts_with("http") {
            config.server_uri.clone()
        } else {
            format!("{}/{}", self.url, config.server_uri.trim_start_matches('/'))
        };
        let mut form = vec![
            ("grant_type", "client_credentials".to_string()),
            ("client_id", config.client_id.clone()),
            ("client_secret", config.client_secret.clone()),
        ];
        if let Some(scope) = &config.scope {
            form.push(("scope", scope.clone()));
        }
        let response = self
            .http
            .post(&uri)
            .form(&form)
            .send()
            .await
            .map_err(|e| transport_error(e, "OAuth2 token request"))?;
        let response = expect_ok(response, "OAuth2 token request").await?;
        let token: TokenResponse = parse_json(response, "OAuth2 token").await?;
        let lifetime = Duration::from_secs(token.expires_in.unwrap_or(3600));
        Ok((
            token.access_token,
            Instant::now() + lifetime - token_margin(lifetime),
        ))
    }

    fn request(&self, method: Method, url: &str, token: Option<&str>) -> RequestBuilder {
        let rb = self.http.request(method, url);
        match token {
            Some(t) => rb.bearer_auth(t),
            None => rb,
        }
    }

    /// Sends a request; on 401 with OAuth2, refreshes the token once and resends.
    async fn send<B: serde::Serialize>(
        &self,
        method: Method,
        url: &str,
        body: Option<&B>,
    ) -> Result<Response> {
        for attempt in 0..2 {
            let token = self.token(attempt > 0).await?;
            let mut rb = self.request(method.clone(), url, token.as_deref());
            if let Some(b) = body {
                rb = rb.json(b);
            }
            let mut request = rb
                .build()
                .map_err(|e| transport_error(e, "catalog request"))?;
            if let Auth::SigV4 {
                region,
                service,
                credentials,
            } = &self.auth
            {
                let temporary = matches!(credentials, CredentialSource::Temporary { .. });
                let credentials = credentials.current().await?;
                for secret in std::iter::once(&credentials.secret).chain(&credentials.token) {
                    match temporary {
                        true => self.secrets.add_vended(secret),
                        false => self.secrets.add(secret),
                    }
                }
                let signer = Signer {
                    region: region.clone(),
                    service: service.clone(),
                    credentials,
                };
                signer.sign(&mut request, std::time::SystemTime::now())?;
            }
            let response = self
                .http
                .execute(request)
                .await
                .map_err(|e| transport_error(e, "catalog request"))?;
            let refreshable = matches!(self.auth, Auth::OAuth2 { .. });
            if response.status() == StatusCode::UNAUTHORIZED && refreshable && attempt == 0 {
                continue;
            }
            return Ok(response);
        }
        unreachable!("loop returns")
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        let url = format!("{}/namespaces/{}", self.base, encode_namespace(namespace));
        let response = self.send(Method::GET, &url, None::<&()>).await?;
        match response.status() {
            s if s.is_success() => Ok(true),
            StatusCode::NOT_FOUND => Ok(false),
            _ => Err(status_error(response, "check namespace").await),
        }
    }

    fn table_url(&self, ident: &TableIdent) -> String {
        format!(
            "{}/namespaces/{}/tables/{}",
            self.base,
            encode_namespace(ident.namespace()),
            encode_segment(ident.name())
        )
    }

    fn loaded(&self, ident: &TableIdent, r: LoadTableResult) -> LoadedTable {
        let io_props = table_io_props(
            r.config,
            r.storage_credentials.unwrap_or_default(),
            r.metadata.location(),
        );
        crate::storage::credential_values(&io_props).for_each(|v| self.secrets.add_vended(v));
        LoadedTable::new(
            ident.clone(),
            r.metadata_location,
            std::sync::Arc::new(r.metadata),
            io_props,
        )
    }
}

/// The FileIO properties of a loaded table: the answer's `config`, with the vended
/// credentials whose prefix is the longest one the table's location starts with (the
/// spec lets a catalog scope credentials to parts of the warehouse). floe writes only
/// under the table's location, so one entry serves all its files.
fn table_io_props(
    mut config: HashMap<String, String>,
    credentials: Vec<iceberg_catalog_rest::StorageCredential>,
    location: &str,
) -> HashMap<String, String> {
    let offered = credentials.len();
    let best = credentials
        .into_iter()
        .filter(|c| covers(&c.prefix, location))
        .max_by_key(|c| c.prefix.len());
    match best {
        Some(c) => config.extend(c.config),
        None if offered > 0 => tracing::warn!(
            "the catalog vended {offered} storage credentials, none for the table's \
             location {location}; using the configured storage credentials"
        ),
        None => {}
    }
    config
}

/// The properties floe asked for that a refusal names (a catalog's list of prohibited
/// keys), longest first so that a key inside another is not taken for it.
fn refused_properties(message: &str, asked: &HashMap<String, String>) -> Vec<String> {
    let mut keys: Vec<&String> = asked.keys().collect();
    keys.sort_by_key(|k| std::cmp::Reverse(k.len()));
    let mut rest = message.to_string();
    let mut refused = Vec::new();
    for key in keys {
        if rest.contains(key.as_str()) {
            rest = rest.replace(key.as_str(), "");
            refused.push(key.clone());
        }
    }
    refused.sort();
    refused
}

/// The schema without identifier-field ids (its fields unchanged).
fn without_identifier_fields(schema: &iceberg::spec::Schema) -> Result<iceberg::spec::Schema> {
    iceberg::spec::Schema::builder()
        .with_schema_id(schema.schema_id())
        .with_fields(schema.as_struct().fields().iter().cloned())
        .build()
        .map_err(Error::from)
}

/// Whether credentials for `prefix` serve files under `location`: a whole path segment
/// prefix (`s3://b/t` and `s3://b/t/` both cover `s3://b/t`, not `s3://b/tx`), with the
/// s3a/s3n schemes read as s3.
fn covers(prefix: &str, location: &str) -> bool {
    if prefix.is_empty() {
        return true;
    }
    let normal = |url: &str| {
        let url = ["s3a://", "s3n://"]
            .iter()
            .find_map(|s| url.strip_prefix(s).map(|rest| format!("s3://{rest}")))
            .unwrap_or_else(|| url.to_string());
        format!("{}/", url.trim_end_matches('/'))
    };
    normal(location).starts_with(&normal(prefix))
}

/// The auth of `catalog.auth.aws_sigv4` (its secrets are registered for redaction when
/// first used).
async fn sigv4_auth(config: &SigV4Config) -> Result<Auth> {
    let region = config
        .region
        .clone()
        .or_else(|| {
            ["AWS_REGION", "AWS_DEFAULT_REGION"]
                .iter()
                .find_map(|v| std::env::var(v).ok().filter(|r| !r.is_empty()))
        })
        .ok_or_else(|| {
            Error::config(
                "catalog.auth.aws_sigv4: region is required (or AWS_REGION / AWS_DEFAULT_REGION)",
            )
        })?;
    let credentials = CredentialSource::resolve(config, &region).await?;
    Ok(Auth::SigV4 {
        region,
        service: config.service.clone(),
        credentials,
    })
}

fn transport_error(e: reqwest::Error, what: &str) -> Error {
    let kind = if e.is_builder() {
        ErrorKind::Config
    } else {
        ErrorKind::Unavailable
    };
    // The URL is named without user info (a password may sit there); the cause chain
    // says what failed (refused, timed out, TLS), which reqwest's own message omits.
    let url = e.url().map(without_user_info).unwrap_or_default();
    let mut causes = Vec::new();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        causes.push(s.to_string());
        source = s.source();
    }
    let mut message = format!("{what} to {url}: {}", e.without_url());
    for cause in causes {
        if !message.contains(&cause) {
            message.push_str(&format!(": {cause}"));
        }
    }
    Error::new(kind, message)
}

fn without_user_info(url: &reqwest::Url) -> String {
    redact_user_info(url.as_str())
}

/// Secret strings to scrub from error messages (tokens fetched later are added).
#[derive(Default)]
struct Secrets {
    configured: std::sync::Mutex<Vec<String>>,
    /// Vended storage credentials, newest last: a catalog may mint new ones with every
    /// load, so only the last [`VENDED_SECRETS_KEPT`] are kept.
    vended: std::sync::Mutex<std::collections::VecDeque<String>>,
}

const VENDED_SECRETS_KEPT: usize = 64;

impl Secrets {
    fn add(&self, secret: &str) {
        // Very short values (e.g. a header "1") would redact ordinary words.
        if secret.len() >= 4 {
            let mut list = self.configured.locked();
            if !list.iter().any(|s| s == secret) {
                list.push(secret.to_string());
            }
        }
    }

    fn add_vended(&self, secret: &str) {
        let mut list = self.vended.locked();
        if secret.len() >= 4 && !list.iter().any(|s| s == secret) {
            if list.len() == VENDED_SECRETS_KEPT {
                list.pop_front();
            }
            list.push_back(secret.to_string());
        }
    }

    fn scrub(&self, mut text: String) -> String {
        let configured = self.configured.locked();
        let vended = self.vended.locked();
        for secret in configured.iter().chain(vended.iter()) {
            if text.contains(secret.as_str()) {
                text = text.replace(secret.as_str(), "<redacted>");
            }
        }
        text
    }
}

async fn parse_json<T: serde::de::DeserializeOwned>(response: Response, what: &str) -> Result<T> {
    let bytes = response
        .bytes()
        .await
        .map_err(|e| transport_error(e, what))?;
    serde_json::from_slice(&bytes).map_err(|e| {
        Error::new(
            ErrorKind::Internal,
            format!("{what}: unexpected response: {e}"),
        )
    })
}

/// Turns a non-2xx response into an error of the right kind, quoting the server's message.
async fn status_error(response: Response, what: &str) -> Error {
    let status = response.status();
    if status.is_redirection() {
        let location = response
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .map(redact_user_info)
            .unwrap_or_else(|| "nowhere".into());
        return Error::new(
            ErrorKind::Rejected,
            format!(
                "{what}: HTTP {status}: the catalog redirects to {location}; floe does not \
                 follow redirects on catalog calls, set catalog.url to the address that answers"
            ),
        );
    }
    let body = response.text().await.unwrap_or_default();
    let message = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .and_then(|m| m.as_str())
                .map(str::to_string)
        })
        .unwrap_or_else(|| body.chars().take(300).collect());
    let kind = match status.as_u16() {
        404 => ErrorKind::NotFound,
        409 => ErrorKind::Conflict,
        429 | 503 => ErrorKind::Unavailable,
        400 | 401 | 403 | 405 | 406 | 422 => ErrorKind::Rejected,
        _ => ErrorKind::Unavailable,
    };
    Error::new(kind, format!("{what}: HTTP {status}: {message}"))
}

async fn expect_ok(response: Response, what: &str) -> Result<Response> {
    if response.status().is_success() {
        Ok(response)
    } else {
        Err(status_error(response, what).await)
    }
}

#[async_trait]
impl Catalog for RestCatalog {
    async fn load_table(&self, ident: &TableIdent) -> Result<Option<LoadedTable>> {
        self.redacted(self.load(ident)).await
    }

    async fn ensure_namespace(&self, namespace: &NamespaceIdent) -> Result<()> {
        self.redacted(self.create_namespace(namespace)).await
    }

    async fn create_table(&self, ident: &TableIdent, table: NewTable) -> Result<LoadedTable> {
        self.redacted(self.create_allowed(ident, table)).await
    }

    fn reads_delete_files(&self) -> bool {
        !self.unity
    }

    async fn commit(
        &self,
        ident: &TableIdent,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
    ) -> Result<LoadedTable> {
        self.redacted(async {
            let request = commit_request(ident, requirements, updates);
            let answer = self.post_commit(ident, &request).await?.whole().await?;
            parse_commit_answer(ident, &answer, HashMap::new())
        })
        .await
    }

    async fn commit_on(
        &self,
        base: LoadedTable,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
    ) -> Result<LoadedTable> {
        self.redacted(async {
            let ident = base.ident.clone();
            let io_props = base.io_props.clone();
            let request = commit_request(&ident, requirements, updates);
            let mut answer = self.post_commit(&ident, &request).await?;
            let head = answer.head(!answer_outgrows_read_on(&base)).await?;
            match head.and_then(|head| applied_locally(base, request.updates, head)) {
                Some(table) => Ok(table),
                None => {
                    let answer = answer.whole().await?;
                    parse_commit_answer(&ident, &answer, io_props)
                }
            }
        })
        .await
    }
}

/// A successful commit's answer, read only as far as floe needs it. A REST catalog
/// answers with the table's whole metadata, every retained snapshot included (about 7 MB
/// at 10,000 snapshots), while the fields floe checks ([`AnswerHead`]) come before the
/// snapshots in Java's catalogs. If the body cannot be read, the commit's outcome is
/// "unknown" (see [`parse_commit_answer`]).
struct CommitAnswer {
    /// The answer's text, as far as the checked fields.
    read: Vec<u8>,
    /// What was read on past them, kept as received: joined only if the whole answer is
    /// needed, which it rarely is.
    past_head: Vec<bytes::Bytes>,
    /// The body still to come; `None` once it ended or failed.
    rest: Option<Response>,
    /// Why the body ended early, if it did while reading on past the checked fields.
    broken: Option<Error>,
}

/// Once the checked fields are read, up to this much more of the answer is read, so a
/// small answer ends and its connection is reused. A longer one is dropped unread, and
/// its connection closed: a new connection costs less than reading megabytes.
const READ_ON_AFTER_HEAD: usize = 256 << 10;

/// Less than a retained snapshot takes in a commit answer as Iceberg's writers make
/// them: 19-digit ids, a 13-digit time, a manifest list named by a UUID under the
/// table's location, a summary and a log entry come to several hundred bytes, and even
/// the tests' small fixture snapshots take ~190. Contrived ones can be smaller (~110
/// bytes); misjudged, it costs only a new connection, or 256 KB read for nothing.
const MIN_ANSWER_BYTES_PER_SNAPSHOT: usize = 160;

/// Whether the answer to a commit on `base` will be longer than floe reads on, as told
/// by the snapshots `base` retains: a chunked answer does not say its length, and reading
/// 256 KB of one that goes on for megabytes is work thrown away.
fn answer_outgrows_read_on(base: &LoadedTable) -> bool {
    base.metadata.snapshots().len() * MIN_ANSWER_BYTES_PER_SNAPSHOT > READ_ON_AFTER_HEAD
}

impl CommitAnswer {
    fn new(response: Response) -> Self {
        CommitAnswer {
            read: Vec::new(),
            past_head: Vec::new(),
            rest: Some(response),
            broken: None,
        }
    }

    async fn next_chunk(&mut self) -> Result<Option<bytes::Bytes>> {
        let Some(response) = self.rest.as_mut() else {
            return Ok(None);
        };
        match response.chunk().await {
            Ok(Some(chunk)) => Ok(Some(chunk)),
            Ok(None) => {
                self.rest = None;
                Ok(None)
            }
            Err(e) => {
                self.rest = None;
                Err(Error::new(
                    ErrorKind::CommitStateUnknown,
                    transport_error(e, "commit").message().to_string(),
                ))
            }
        }
    }

    /// The checked fields, from as little of the answer as holds them; `None` when the
    /// whole answer does not hold them all. With `read_on`, what follows them may be read
    /// too (see [`CommitAnswer::read_on`]); without, the answer's table is known to be too
    /// long for it.
    async fn head(&mut self, read_on: bool) -> Result<Option<AnswerHead>> {
        // Scanned again each time the text read doubles: linear in the answer's size even
        // when the fields come last.
        let mut next_scan = 0;
        while let Some(chunk) = self.next_chunk().await? {
            self.read.extend_from_slice(&chunk);
            if self.read.len() < next_scan {
                continue;
            }
            if let Some(head) = AnswerHead::scan_prefix(&self.read) {
                if read_on {
                    self.read_on().await;
                }
                return Ok(Some(head));
            }
            next_scan = 2 * self.read.len();
        }
        Ok(AnswerHead::scan_ended(&self.read))
    }

    /// Reads up to [`READ_ON_AFTER_HEAD`] more, so a short answer ends and its connection
    /// is kept; not when the answer says more than that is left, as its connection closes
    /// unread either way. A failure here is kept for [`CommitAnswer::whole`]: the checked
    /// fields stand, the whole answer is unknown.
    async fn read_on(&mut self) {
        let left = self.rest.as_ref().and_then(Response::content_length);
        if left.is_some_and(|left| left > READ_ON_AFTER_HEAD as u64) {
            return;
        }
        let mut more = 0;
        while more <= READ_ON_AFTER_HEAD {
            match self.next_chunk().await {
                Ok(Some(chunk)) => {
                    more += chunk.len();
                    self.past_head.push(chunk);
                }
                Ok(None) => return,
                Err(e) => {
                    self.broken = Some(e);
                    return;
                }
            }
        }
    }

    /// The whole answer.
    async fn whole(mut self) -> Result<Vec<u8>> {
        if let Some(e) = self.broken.take() {
            return Err(e);
        }
        for chunk in std::mem::take(&mut self.past_head) {
            self.read.extend_from_slice(&chunk);
        }
        while let Some(chunk) = self.next_chunk().await? {
            self.read.extend_from_slice(&chunk);
        }
        Ok(self.read)
    }
}

fn commit_request(
    ident: &TableIdent,
    requirements: Vec<TableRequirement>,
    updates: Vec<TableUpdate>,
) -> CommitTableRequest {
    CommitTableRequest {
        identifier: Some(ident.clone()),
        requirements,
        updates,
    }
}

/// The table a successful commit answer carries. If it cannot be read, the outcome is
/// "unknown", so the caller reloads and finds its commit id instead of treating the
/// rows as not written.
fn parse_commit_answer(
    ident: &TableIdent,
    answer: &[u8],
    io_props: HashMap<String, String>,
) -> Result<LoadedTable> {
    match serde_json::from_slice::<CommitTableResponse>(answer) {
        Ok(result) => Ok(LoadedTable::new(
            ident.clone(),
            Some(result.metadata_location),
            std::sync::Arc::new(result.metadata),
            io_props,
        )),
        Err(e) => Err(Error::new(
            ErrorKind::CommitStateUnknown,
            format!("commit: unexpected response: {e}"),
        )),
    }
}

/// `base` with `updates` applied, if the catalog's answer agrees with it (see
/// [`super::answer`]); `None` sends the caller to the answer's own table.
fn applied_locally(
    base: LoadedTable,
    updates: Vec<TableUpdate>,
    head: AnswerHead,
) -> Option<LoadedTable> {
    let refs = refs_after(base.refs(), &updates);
    let LoadedTable {
        ident,
        metadata_location,
        metadata,
        io_props,
        ..
    } = base;
    let metadata = match apply_updates(metadata, metadata_location, updates) {
        Ok(m) => m,
        Err(e) => {
            tracing::debug!(
                "commit to {ident}: applying it locally failed ({e}); reading the catalog's answer"
            );
            return None;
        }
    };
    if !head.agrees_with(&metadata, refs.as_ref()) {
        tracing::debug!(
            "commit to {ident}: the catalog's answer differs from the commit applied locally; reading the answer"
        );
        return None;
    }
    Some(
        LoadedTable::new(
            ident,
            head.metadata_location,
            std::sync::Arc::new(metadata),
            io_props,
        )
        .with_refs(refs),
    )
}

impl RestCatalog {
    /// Runs a catalog call, scrubbing every secret from its error (a server may quote
    /// a header or token back in its error body).
    async fn redacted<T>(&self, call: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        call.await
            .map_err(|e| Error::new(e.kind(), self.secrets.scrub(e.message().to_string())))
    }

    async fn load(&self, ident: &TableIdent) -> Result<Option<LoadedTable>> {
        let response = self
            .send(Method::GET, &self.table_url(ident), None::<&()>)
            .await?;
        if response.status() == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let response = expect_ok(response, &format!("load table {ident}")).await?;
        let result: LoadTableResult = parse_json(response, "load table").await?;
        Ok(Some(self.loaded(ident, result)))
    }

    async fn create_namespace(&self, namespace: &NamespaceIdent) -> Result<()> {
        if self.namespace_exists(namespace).await? {
            return Ok(());
        }
        let body = serde_json::json!({ "namespace": namespace.as_ref(), "properties": {} });
        let response = self
            .send(
                Method::POST,
                &format!("{}/namespaces", self.base),
                Some(&body),
            )
            .await?;
        if response.status() == StatusCode::CONFLICT {
            return Ok(());
        }
        match expect_ok(
            response,
            &format!("create namespace {}", namespace.as_ref().join(".")),
        )
        .await
        {
            Ok(_) => Ok(()),
            // A concurrent creator may have won in a way the server reports badly
            // (some servers answer 500 to a duplicate insert): believe what is there.
            Err(e) if self.namespace_exists(namespace).await.unwrap_or(false) => {
                tracing::debug!("namespace created concurrently: {e}");
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Creates a table the way the catalog accepts it: on Unity Catalog without
    /// identifier-field ids; and when the catalog refuses properties floe set, naming them
    /// (Unity's "prohibited keys"), once more without those, with a warning.
    async fn create_allowed(&self, ident: &TableIdent, mut table: NewTable) -> Result<LoadedTable> {
        if self.unity && table.schema.identifier_field_ids().next().is_some() {
            table.schema = without_identifier_fields(&table.schema)?;
        }
        match self.create(ident, table.clone()).await {
            Err(e) if e.kind() == ErrorKind::Rejected => {
                let refused = refused_properties(e.message(), &table.properties);
                if refused.is_empty() {
                    return Err(e);
                }
                tracing::warn!(
                    "the catalog refused the table properties {} when creating {ident}; \
                     creating it without them",
                    refused.join(", ")
                );
                table.properties.retain(|k, _| !refused.contains(k));
                self.create(ident, table).await
            }
            other => other,
        }
    }

    async fn create(&self, ident: &TableIdent, table: NewTable) -> Result<LoadedTable> {
        let request = CreateTableRequest {
            name: ident.name().to_string(),
            location: table.location,
            schema: table.schema,
            partition_spec: table.partition_spec,
            write_order: None,
            stage_create: Some(false),
            properties: table.properties,
        };
        let url = format!(
            "{}/namespaces/{}/tables",
            self.base,
            encode_namespace(ident.namespace())
        );
        let response = self.send(Method::POST, &url, Some(&request)).await?;
        if response.status() == StatusCode::CONFLICT {
            return self.load(ident).await?.ok_or_else(|| {
                Error::internal(format!("table {ident} exists but cannot be loaded"))
            });
        }
        match expect_ok(response, &format!("create table {ident}")).await {
            Ok(response) => {
                let result: LoadTableResult = parse_json(response, "create table").await?;
                Ok(self.loaded(ident, result))
            }
            // As for namespaces: a concurrent creator may have won.
            Err(e) => match self.load(ident).await {
                Ok(Some(table)) => Ok(table),
                _ => Err(e),
            },
        }
    }

    /// Posts a commit; returns a successful answer, to be read.
    async fn post_commit(
        &self,
        ident: &TableIdent,
        request: &CommitTableRequest,
    ) -> Result<CommitAnswer> {
        let response = match self
            .send(Method::POST, &self.table_url(ident), Some(request))
            .await
        {
            Ok(r) => r,
            // The request may have reached the server before the connection failed.
            Err(e) if e.kind() == ErrorKind::Unavailable => {
                return Err(Error::new(
                    ErrorKind::CommitStateUnknown,
                    e.message().to_string(),
                ));
            }
            Err(e) => return Err(e),
        };
        let status = response.status();
        if status.is_success() {
            return Ok(CommitAnswer::new(response));
        }
        let error = status_error(response, &format!("commit to {ident}")).await;
        // Only answers that say the request was refused are definite; any other (5xx,
        // 408, proxies' surprises) may come after the server applied the commit.
        let definite = matches!(
            status.as_u16(),
            400 | 401 | 403 | 404 | 405 | 406 | 409 | 422 | 429
        );
        if !definite {
            return Err(Error::new(
                ErrorKind::CommitStateUnknown,
                error.message().to_string(),
            ));
        }
        Err(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg_catalog_rest::StorageCredential;

    fn credential(prefix: &str, key: &str) -> StorageCredential {
        StorageCredential {
            prefix: prefix.into(),
            config: [("s3.access-key-id".to_string(), key.to_string())].into(),
        }
    }

    /// A commit answer of `snapshots` snapshots after the checked fields, as Java's
    /// catalogs order them.
    fn big_answer(snapshots: usize) -> String {
        let snapshot = r#"{"snapshot-id":5,"summary":{"operation":"append"}}"#;
        format!(
            r#"{{"metadata-location":"l","metadata":{{"format-version":2,"table-uuid":"u","location":"l","current-snapshot-id":5,"properties":{{}},"refs":{{}},"last-sequence-number":123,"snapshots":[{}]}}}}"#,
            vec![snapshot; snapshots].join(",")
        )
    }

    /// How a served answer says where its body ends.
    #[derive(Clone, Copy)]
    enum Framing {
        ContentLength,
        Chunked,
        /// No length: the body ends where the server closes the connection.
        CloseDelimited,
    }

    /// Serves `body` once on 127.0.0.1 in 1 KB writes, then, if `cut`, closes the
    /// connection 64 KB into the body; returns the answer as floe reads it.
    async fn served_answer(body: String, cut: bool) -> CommitAnswer {
        served_answer_framed(body, cut, Framing::ContentLength).await
    }

    async fn served_answer_framed(body: String, cut: bool, framing: Framing) -> CommitAnswer {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 4096];
            let _ = tokio::io::AsyncReadExt::read(&mut socket, &mut request).await;
            let length = match framing {
                Framing::ContentLength => format!("content-length: {}", body.len()),
                Framing::Chunked => "transfer-encoding: chunked".to_string(),
                Framing::CloseDelimited => "connection: close".to_string(),
            };
            let header =
                format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{length}\r\n\r\n");
            socket.write_all(header.as_bytes()).await.unwrap();
            for (n, piece) in body.as_bytes().chunks(1024).enumerate() {
                if cut && n == 64 {
                    return;
                }
                let framed = match framing {
                    Framing::ContentLength | Framing::CloseDelimited => piece.to_vec(),
                    Framing::Chunked => {
                        [format!("{:x}\r\n", piece.len()).as_bytes(), piece, b"\r\n"].concat()
                    }
                };
                if socket.write_all(&framed).await.is_err() {
                    return;
                }
            }
            if let Framing::Chunked = framing {
                let _ = socket.write_all(b"0\r\n\r\n").await;
            }
        });
        CommitAnswer::new(reqwest::get(url).await.unwrap())
    }

    /// Bytes of the answer taken from the connection so far.
    fn taken(answer: &CommitAnswer) -> usize {
        answer.read.len() + answer.past_head.iter().map(|c| c.len()).sum::<usize>()
    }

    #[tokio::test]
    async fn a_long_answer_is_read_only_to_its_checked_fields_and_whole_on_demand() {
        let body = big_answer(40_000);
        assert!(body.len() > 1 << 20);
        let mut answer = served_answer(body.clone(), false).await;
        let head = answer.head(true).await.unwrap().unwrap();
        assert_eq!(head, AnswerHead::scan(body.as_bytes()).unwrap());
        assert_eq!(head.last_sequence_number, Some(123));
        // Its length said more than READ_ON_AFTER_HEAD was left: nothing is read on.
        assert!(answer.past_head.is_empty());
        assert!(taken(&answer) < 64 << 10, "read {} B", taken(&answer));
        // Disagreeing with the answer needs all of it: still there to read.
        assert_eq!(answer.whole().await.unwrap(), body.as_bytes());
    }

    #[tokio::test]
    async fn a_long_answer_of_unknown_length_is_read_on_only_so_far() {
        let body = big_answer(40_000);
        let mut answer = served_answer_framed(body.clone(), false, Framing::Chunked).await;
        assert!(answer.head(true).await.unwrap().is_some());
        let past_head = taken(&answer) - answer.read.len();
        assert!(
            (READ_ON_AFTER_HEAD..READ_ON_AFTER_HEAD + (64 << 10)).contains(&past_head),
            "read on {past_head} B"
        );
        assert!(answer.rest.is_some(), "the rest is left unread");
        assert_eq!(answer.whole().await.unwrap(), body.as_bytes());
    }

    #[tokio::test]
    async fn an_answer_its_table_says_is_long_is_not_read_on() {
        let body = big_answer(40_000);
        let mut answer = served_answer_framed(body.clone(), false, Framing::Chunked).await;
        // As commit_on asks for a table whose snapshots say so.
        assert!(answer.head(false).await.unwrap().is_some());
        assert!(answer.past_head.is_empty());
        assert_eq!(answer.whole().await.unwrap(), body.as_bytes());
    }

    /// The fixture table with `count` snapshots, each the child of the one before.
    fn table_with_snapshots(count: usize) -> LoadedTable {
        let mut json: serde_json::Value =
            serde_json::from_str(include_str!("../testdata/two_snapshots.json")).unwrap();
        let first = json["snapshots"][0].clone();
        let base_id = first["snapshot-id"].as_i64().unwrap();
        let snapshots: Vec<serde_json::Value> = (0..count as i64)
            .map(|n| {
                let mut s = first.clone();
                s["snapshot-id"] = (base_id + n).into();
                s["sequence-number"] = (n + 1).into();
                if n == 0 {
                    s.as_object_mut().unwrap().remove("parent-snapshot-id");
                } else {
                    s["parent-snapshot-id"] = (base_id + n - 1).into();
                }
                s
            })
            .collect();
        json["snapshots"] = snapshots.into();
        json["current-snapshot-id"] = (base_id + count as i64 - 1).into();
        json["last-sequence-number"] = (count as i64).into();
        json["refs"] = serde_json::json!({"main": {"snapshot-id": base_id + count as i64 - 1, "type": "branch"}});
        let metadata: iceberg::spec::TableMetadata = serde_json::from_value(json).unwrap();
        let ident = TableIdent::from_strs(["ns", "t"]).unwrap();
        LoadedTable::new(ident, None, std::sync::Arc::new(metadata), HashMap::new())
    }

    #[test]
    fn a_table_of_many_snapshots_answers_beyond_what_is_read_on() {
        assert!(!answer_outgrows_read_on(&table_with_snapshots(2)));
        assert!(!answer_outgrows_read_on(&table_with_snapshots(1_600)));
        let long = table_with_snapshots(1_700);
        assert!(answer_outgrows_read_on(&long));
        // The bound holds for the fixture's minimal snapshots: its answer is longer.
        let answer = serde_json::to_string(long.metadata.as_ref()).unwrap();
        assert!(answer.len() > READ_ON_AFTER_HEAD, "{} B", answer.len());
    }

    #[tokio::test]
    async fn a_short_answer_is_read_to_its_end() {
        // Past its checked fields, less than READ_ON_AFTER_HEAD is left: read to the end
        // (its connection is reused), whether or not its length was given.
        let body = big_answer(4_000);
        assert!(body.len() > 128 << 10 && body.len() < READ_ON_AFTER_HEAD);
        for framing in [Framing::ContentLength, Framing::Chunked] {
            let mut answer = served_answer_framed(body.clone(), false, framing).await;
            assert!(answer.head(true).await.unwrap().is_some());
            assert!(answer.rest.is_none(), "a small answer is read to its end");
            assert_eq!(answer.whole().await.unwrap(), body.as_bytes());
        }
    }

    #[tokio::test]
    async fn an_answer_cut_short_is_an_unknown_outcome() {
        // Cut before the checked fields end: no head, and the outcome is unknown.
        let mut answer = served_answer(" ".repeat(100_000) + &big_answer(10), true).await;
        let e = answer.head(true).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::CommitStateUnknown);
        // Cut after them: the head stands; the whole answer is unknown, and says why.
        let mut answer = served_answer(big_answer(40_000), true).await;
        assert!(answer.head(true).await.unwrap().is_some());
        let e = answer.whole().await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::CommitStateUnknown);
        assert!(e.message().contains("commit"), "{e}");
    }

    #[tokio::test]
    async fn an_answer_ending_inside_a_checked_number_is_no_answer() {
        // Without a length, a connection cut inside `"last-sequence-number":123` looks
        // like the answer's end: 12 must not be taken for the catalog's word.
        let whole = big_answer(0);
        let cut = &whole[..whole.find("123").unwrap() + 2];
        let mut answer =
            served_answer_framed(cut.to_string(), false, Framing::CloseDelimited).await;
        assert_eq!(answer.head(true).await.unwrap(), None);
        // The same framing, uncut, is read as usual.
        let mut answer = served_answer_framed(whole.clone(), false, Framing::CloseDelimited).await;
        assert_eq!(
            answer
                .head(true)
                .await
                .unwrap()
                .unwrap()
                .last_sequence_number,
            Some(123)
        );
        assert_eq!(answer.whole().await.unwrap(), whole.as_bytes());
    }

    #[test]
    fn the_longest_prefix_of_the_table_location_picks_the_credentials() {
        let config: HashMap<String, String> =
            [("s3.endpoint".to_string(), "http://s3".to_string())].into();
        let offered = vec![
            credential("s3://lake/", "bucket-wide"),
            credential("s3://lake/wh/ns/t", "table"),
            credential("s3://other/", "elsewhere"),
        ];
        let props = table_io_props(config.clone(), offered, "s3://lake/wh/ns/t");
        assert_eq!(props["s3.access-key-id"], "table");
        assert_eq!(props["s3.endpoint"], "http://s3");
        assert!(covers("s3://lake/wh/ns/t/", "s3://lake/wh/ns/t"));
        assert!(covers("s3a://lake/wh", "s3://lake/wh/ns/t"));
        assert!(!covers("s3://lake/wh/ns/t", "s3://lake/wh/ns/tx"));
        assert!(covers("", "s3://lake/t"));
        let none_fits = table_io_props(config, vec![credential("s3://other/", "x")], "s3://lake/t");
        assert!(!none_fits.contains_key("s3.access-key-id"));
    }

    #[test]
    fn refused_properties_are_those_the_refusal_names() {
        let asked: HashMap<String, String> = [
            "write.update.mode",
            "write.metadata.delete-after-commit.enabled",
            "write.metadata.delete-after-commit.enabled.x",
        ]
        .iter()
        .map(|k| (k.to_string(), "v".to_string()))
        .collect();
        let message = "create table t: HTTP 400 Bad Request: Table properties \
                       ['write.metadata.delete-after-commit.enabled'] are prohibited";
        assert_eq!(
            refused_properties(message, &asked),
            vec!["write.metadata.delete-after-commit.enabled".to_string()]
        );
        assert!(refused_properties("Invalid schema", &asked).is_empty());
    }

    #[test]
    fn vended_credentials_are_asked_for_unless_the_config_says_otherwise() {
        let mut headers = reqwest::header::HeaderMap::new();
        ask_for_vended_credentials(&mut headers);
        assert_eq!(headers[ACCESS_DELEGATION], "vended-credentials");
        let mut own = reqwest::header::HeaderMap::new();
        own.insert(
            "X-Iceberg-Access-Delegation",
            "remote-signing".parse().unwrap(),
        );
        ask_for_vended_credentials(&mut own);
        assert_eq!(own[ACCESS_DELEGATION], "remote-signing");
        let mut off = reqwest::header::HeaderMap::new();
        off.insert("X-Iceberg-Access-Delegation", "".parse().unwrap());
        ask_for_vended_credentials(&mut off);
        assert!(off.get(ACCESS_DELEGATION).is_none());
    }
}
