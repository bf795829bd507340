//! floe's Iceberg REST catalog client: a thin layer over reqwest (rustls).
//!
//! It reuses iceberg-catalog-rest's serde types but posts commits itself, so snapshot
//! kinds the stock client lacks need no fork, and it classifies every failure so the
//! committer knows whether to retry, rebuild, or look for its commit id (5xx on commit
//! means the outcome is unknown). Tokens never appear in errors.

//!
//! In files of one job each: this one is the client (connecting, sending, classifying
//! answers), `auth` the bearer, OAuth2 and SigV4 credentials and the secrets kept out of
//! errors, `requests` the namespace, table and commit calls, `commit_answer` what a
//! commit's answer says.

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
use super::{Catalog, LoadedTable, NewTable, TableChanges};
use crate::config::{CatalogConfig, OAuth2Config, SigV4Config, redact_user_info};
use crate::error::{Error, ErrorKind, Result};
use crate::sync::LockExt;

mod auth;
mod commit_answer;
mod requests;
#[cfg(test)]
mod tests;

use auth::*;
use commit_answer::*;
use requests::*;

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
    /// The endpoints `/v1/config` says the server offers (`None`: it did not say).
    endpoints: Option<Vec<String>>,
}

/// The multi-table commit endpoint, as `/v1/config` lists it.
const COMMIT_TRANSACTION: &str = "POST /v1/{prefix}/transactions/commit";

/// The path of Unity Catalog's Iceberg REST endpoint (Databricks).
const UNITY_PATH: &str = "/api/2.1/unity-catalog/iceberg-rest";

#[derive(Deserialize)]
struct ConfigResponse {
    #[serde(default)]
    overrides: HashMap<String, String>,
    #[serde(default)]
    defaults: HashMap<String, String>,
    #[serde(default)]
    endpoints: Option<Vec<String>>,
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

/// Namespace levels joined by the unit separator, as the REST spec asks, URL-encoded.
fn encode_namespace(ns: &NamespaceIdent) -> String {
    let joined = ns.as_ref().join("\u{1f}");
    url::form_urlencoded::byte_serialize(joined.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
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
            endpoints: None,
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
        catalog.endpoints = cfg.endpoints;
        let mut props = cfg.defaults;
        props.extend(cfg.overrides);
        if let Some(prefix) = props.get("prefix").filter(|p| !p.is_empty()) {
            catalog.base = format!("{url}/v1/{}", prefix.trim_matches('/'));
        }
        Ok(catalog)
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

async fn parse_json<T: serde::de::DeserializeOwned>(response: Response, what: &str) -> Result<T> {
    parse_slice(&read_body(response, what).await?, what)
}

/// The whole body of `response`.
async fn read_body(response: Response, what: &str) -> Result<bytes::Bytes> {
    response.bytes().await.map_err(|e| transport_error(e, what))
}

/// `bytes` as JSON of a `T`; `what` names the request in the error.
fn parse_slice<T: serde::de::DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| {
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

    fn check_commit_tables(&self) -> Result<()> {
        offers_commit_transaction(self.endpoints.as_deref())
    }

    async fn commit_tables(&self, changes: Vec<TableChanges>) -> Result<()> {
        self.redacted(self.post_transaction(changes)).await
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
