//! Where SigV4 credentials come from when `catalog.auth.aws_sigv4.credentials` is not
//! set: the AWS SDKs' default chain, in their order.
//!
//! 1. the environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`);
//! 2. the shared credentials file (`AWS_SHARED_CREDENTIALS_FILE` or `~/.aws/credentials`,
//!    profile `AWS_PROFILE` or `default`);
//! 3. web identity (`AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN`, as EKS's IRSA sets
//!    them): STS `AssumeRoleWithWebIdentity` (`AWS_ENDPOINT_URL_STS` overrides STS's
//!    regional endpoint);
//! 4. the container endpoint (`AWS_CONTAINER_CREDENTIALS_RELATIVE_URI` on ECS, or
//!    `AWS_CONTAINER_CREDENTIALS_FULL_URI` with `AWS_CONTAINER_AUTHORIZATION_TOKEN[_FILE]`
//!    on EKS Pod Identity);
//! 5. the instance's role through IMDSv2 (`AWS_EC2_METADATA_SERVICE_ENDPOINT` overrides
//!    the address; `AWS_EC2_METADATA_DISABLED=true` skips it).
//!
//! The first three are read once; the last three give temporary credentials, which are
//! fetched again before they expire (at half their life, at most 5 minutes early), so a
//! writer that runs for days keeps signing. SSO profiles are not read.

use std::time::{Duration, SystemTime};

use tokio::sync::Mutex;

use super::sigv4::{Credentials, Signer, from_env, from_shared_file};
use crate::config::{SigV4Config, TcpConfig};
use crate::error::{Error, ErrorKind, Result};

/// Credentials for signing, fixed or fetched again before they expire.
pub enum CredentialSource {
    Fixed(Credentials),
    Temporary {
        provider: Box<Provider>,
        http: reqwest::Client,
        cached: Mutex<Cached>,
    },
}

/// Temporary credentials, when to fetch the next ones, and when they stop working.
pub(super) struct Cached {
    credentials: Credentials,
    refresh_at: SystemTime,
    expiry: Option<SystemTime>,
}

/// A fetch of temporary credentials and their expiry.
type FetchFuture<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<(Credentials, Option<SystemTime>)>> + Send + 'a>,
>;

/// A source of temporary credentials (not `Debug`: it may hold a container token).
pub enum Provider {
    /// STS AssumeRole, signed with the base credentials (`credentials.role`).
    AssumeRole {
        base: std::sync::Arc<CredentialSource>,
        role_arn: String,
        external_id: Option<String>,
        session_name: String,
        sts_url: String,
        region: String,
    },
    WebIdentity {
        token_file: String,
        role_arn: String,
        session_name: String,
        sts_url: String,
    },
    Container {
        url: String,
        authorization: Option<ContainerAuth>,
    },
    Instance {
        endpoint: String,
    },
}

#[derive(Clone)]
pub enum ContainerAuth {
    Token(String),
    TokenFile(String),
}

/// Refresh at most this long before temporary credentials expire.
const MAX_MARGIN: Duration = Duration::from_secs(300);

/// After a failed refresh, ask again this soon at the latest.
const RETRY_FAILED_REFRESH: Duration = Duration::from_secs(30);

impl CredentialSource {
    /// Where `catalog.auth.aws_sigv4` says credentials come from, as Redpanda Connect
    /// reads its section: `credentials.from_ec2_role`: the instance's role; else a
    /// profile's keys (`credentials.profile`), the keys given, or the default chain;
    /// then, with `credentials.role`, the role those credentials assume through STS
    /// (at `endpoint` when set). Temporary credentials are fetched once here, so a missing
    /// role fails at start. The calls for credentials go through a client with the
    /// section's `tcp` settings.
    pub async fn resolve(config: &SigV4Config, region: &str) -> Result<Self> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let http = credentials_client(config.tcp.as_ref())?;
        let sts_url = config
            .endpoint
            .clone()
            .or_else(|| env("AWS_ENDPOINT_URL_STS"))
            .unwrap_or_else(|| regional_sts(region));
        let c = config.credentials.clone().unwrap_or_default();
        if c.from_ec2_role {
            let provider = Provider::Instance {
                endpoint: instance_endpoint(env),
            };
            return Self::temporary(provider, http).await.map_err(|e| {
                Error::config(format!(
                    "catalog.auth.aws_sigv4.credentials.from_ec2_role: the instance metadata \
                     service could not be reached or has no role ({e})"
                ))
            });
        }
        let base = if let Some(profile) = &c.profile {
            let keys = shared_file_credentials(profile).ok_or_else(|| {
                Error::config(format!(
                    "catalog.auth.aws_sigv4.credentials.profile {profile:?} has no \
                     aws_access_key_id / aws_secret_access_key in the credentials or config \
                     file (role_arn, credential_process and sso profiles are not supported: \
                     give the role in credentials.role)"
                ))
            })?;
            CredentialSource::Fixed(keys)
        } else if let (Some(id), Some(secret)) = (&c.id, &c.secret) {
            CredentialSource::Fixed(Credentials {
                id: id.clone(),
                secret: secret.clone(),
                token: c.token.clone(),
            })
        } else {
            Self::default_chain(&sts_url, http.clone()).await?
        };
        let Some(role_arn) = &c.role else {
            return Ok(base);
        };
        let provider = Provider::AssumeRole {
            base: std::sync::Arc::new(base),
            role_arn: role_arn.clone(),
            external_id: c.role_external_id.clone(),
            session_name: env("AWS_ROLE_SESSION_NAME").unwrap_or_else(|| "floe-catalog".into()),
            sts_url,
            region: region.to_string(),
        };
        Self::temporary(provider, http).await
    }

    /// The AWS SDKs' default chain: the environment's keys, a profile's
    /// (`AWS_PROFILE`), then web identity, the container endpoint or the instance.
    async fn default_chain(sts_url: &str, http: reqwest::Client) -> Result<Self> {
        if let Some(c) = from_env(|k| std::env::var(k).ok()) {
            return Ok(CredentialSource::Fixed(c));
        }
        let profile = std::env::var("AWS_PROFILE")
            .ok()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "default".into());
        if let Some(c) = shared_file_credentials(&profile) {
            return Ok(CredentialSource::Fixed(c));
        }
        if std::env::var("AWS_PROFILE").is_ok_and(|p| !p.is_empty()) {
            // The SDKs would sign as that profile; the next sources would be someone else.
            return Err(Error::config(format!(
                "catalog.auth.aws_sigv4: AWS_PROFILE {profile:?} has no aws_access_key_id / \
                 aws_secret_access_key in the credentials or config file (role_arn, \
                 credential_process and sso profiles are not supported)"
            )));
        }
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let Some(provider) = Provider::from_env(env, sts_url) else {
            return Err(no_credentials(&profile));
        };
        let instance = matches!(provider, Provider::Instance { .. });
        match Self::temporary(provider, http).await {
            Err(e) if instance => Err(Error::config(format!(
                "{}: the instance metadata service could not be reached or has no role \
                 ({e}); set AWS_EC2_METADATA_DISABLED=true off EC2",
                no_credentials(&profile)
            ))),
            result => result,
        }
    }

    /// Temporary credentials from a provider, fetched now.
    async fn temporary(provider: Provider, http: reqwest::Client) -> Result<Self> {
        let (credentials, expiry) = provider.fetch(&http).await?;
        Ok(CredentialSource::Temporary {
            provider: Box::new(provider),
            http,
            cached: Mutex::new(Cached {
                credentials,
                refresh_at: refresh_at(expiry, SystemTime::now()),
                expiry,
            }),
        })
    }

    /// Credentials to sign with now, fetched again when due.
    pub async fn current(&self) -> Result<Credentials> {
        match self {
            CredentialSource::Fixed(c) => Ok(c.clone()),
            CredentialSource::Temporary {
                provider,
                http,
                cached,
            } => {
                let mut cached = cached.lock().await;
                let now = SystemTime::now();
                if now < cached.refresh_at {
                    return Ok(cached.credentials.clone());
                }
                match provider.fetch(http).await {
                    Ok((credentials, expiry)) => {
                        let now = SystemTime::now();
                        *cached = Cached {
                            credentials,
                            refresh_at: refresh_at(expiry, now),
                            expiry,
                        };
                        Ok(cached.credentials.clone())
                    }
                    // The old credentials still work: sign with them, ask again soon.
                    Err(e) if cached.expiry.is_none_or(|at| now < at) => {
                        tracing::warn!(
                            "renewing the catalog's AWS credentials failed ({e}); the current \
                             ones are used until they expire"
                        );
                        let left = cached
                            .expiry
                            .and_then(|at| at.duration_since(now).ok())
                            .unwrap_or(RETRY_FAILED_REFRESH);
                        cached.refresh_at = now + RETRY_FAILED_REFRESH.min(left / 4);
                        Ok(cached.credentials.clone())
                    }
                    Err(e) => Err(Error::new(
                        ErrorKind::Unavailable,
                        format!(
                            "the catalog's AWS credentials expired and renewing them failed: {e}"
                        ),
                    )),
                }
            }
        }
    }
}

fn no_credentials(profile: &str) -> Error {
    Error::config(format!(
        "catalog.auth.aws_sigv4: no credentials: none configured, none in \
         AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, no profile {profile:?} in the shared \
         credentials file, no web identity or container credentials, and no instance role"
    ))
}

/// STS's endpoint in a region.
fn regional_sts(region: &str) -> String {
    let suffix = match region.starts_with("cn-") {
        true => "amazonaws.com.cn",
        false => "amazonaws.com",
    };
    format!("https://sts.{region}.{suffix}")
}

/// The instance metadata service's address (`AWS_EC2_METADATA_SERVICE_ENDPOINT`).
fn instance_endpoint(env: impl Fn(&str) -> Option<String>) -> String {
    env("AWS_EC2_METADATA_SERVICE_ENDPOINT")
        .unwrap_or_else(|| "http://169.254.169.254".into())
        .trim_end_matches('/')
        .to_string()
}

/// What the credential calls' TCP connections get from `aws_sigv4.tcp`: the connect
/// timeout (floe's 2 s when `0s`: the instance metadata address must fail fast off EC2),
/// keep-alive probes (Benthos' defaults for zero values; none for a negative idle) and
/// the Linux TCP user timeout.
#[derive(Debug, PartialEq)]
struct TcpSettings {
    connect_timeout: Duration,
    keep_alive: Option<(Duration, Duration, u32)>,
    user_timeout: Option<Duration>,
}

fn tcp_settings(tcp: Option<&TcpConfig>) -> TcpSettings {
    let default = TcpConfig::default();
    let tcp = tcp.unwrap_or(&default);
    TcpSettings {
        connect_timeout: match tcp.connect_timeout.is_zero() {
            true => Duration::from_secs(2),
            false => tcp.connect_timeout,
        },
        keep_alive: tcp.keep_alive.as_ref().and_then(|k| k.effective()),
        user_timeout: (!tcp.tcp_user_timeout.is_zero()).then_some(tcp.tcp_user_timeout),
    }
}

/// The client of the calls for credentials (STS, the container endpoint, instance
/// metadata): no redirects, 10 s per call, and `aws_sigv4.tcp`'s settings.
fn credentials_client(tcp: Option<&TcpConfig>) -> Result<reqwest::Client> {
    let settings = tcp_settings(tcp);
    let mut builder = reqwest::Client::builder()
        .connect_timeout(settings.connect_timeout)
        .timeout(Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::none());
    if let Some((idle, interval, count)) = settings.keep_alive {
        builder = builder
            .tcp_keepalive(idle)
            .tcp_keepalive_interval(interval)
            .tcp_keepalive_retries(count);
    }
    #[cfg(target_os = "linux")]
    if let Some(timeout) = settings.user_timeout {
        builder = builder.tcp_user_timeout(timeout);
    }
    builder
        .build()
        .map_err(|e| Error::config(format!("cannot build HTTP client: {e}")))
}

/// A profile's static keys from the shared credentials file, else from the config file
/// (whose sections are `[profile name]`, but `[default]`).
fn shared_file_credentials(profile: &str) -> Option<Credentials> {
    let home = |name: &str| {
        std::env::var("HOME")
            .ok()
            .map(|h| format!("{h}/.aws/{name}"))
    };
    let read = |path: Option<String>| path.and_then(|p| std::fs::read_to_string(p).ok());
    let credentials = read(
        std::env::var("AWS_SHARED_CREDENTIALS_FILE")
            .ok()
            .or_else(|| home("credentials")),
    );
    if let Some(c) = credentials.and_then(|text| from_shared_file(&text, profile)) {
        return Some(c);
    }
    let config = read(
        std::env::var("AWS_CONFIG_FILE")
            .ok()
            .or_else(|| home("config")),
    )?;
    let section = match profile {
        "default" => "default".to_string(),
        named => format!("profile {named}"),
    };
    from_shared_file(&config, &section)
}

/// When to fetch again credentials that expire at `expiry` (received `now`): half
/// their life early, at most [`MAX_MARGIN`]; without an expiry, in an hour.
fn refresh_at(expiry: Option<SystemTime>, now: SystemTime) -> SystemTime {
    match expiry {
        Some(at) => {
            let life = at.duration_since(now).unwrap_or_default();
            at - (life / 2).min(MAX_MARGIN)
        }
        None => now + Duration::from_secs(3600),
    }
}

impl Provider {
    /// The provider the environment names, in the chain's order (web identity, through
    /// STS at `sts_url`; container; instance); `None` when instance metadata is disabled
    /// and nothing else is set.
    fn from_env(env: impl Fn(&str) -> Option<String>, sts_url: &str) -> Option<Provider> {
        if let (Some(token_file), Some(role_arn)) =
            (env("AWS_WEB_IDENTITY_TOKEN_FILE"), env("AWS_ROLE_ARN"))
        {
            return Some(Provider::WebIdentity {
                token_file,
                role_arn,
                session_name: env("AWS_ROLE_SESSION_NAME").unwrap_or_else(|| "floe-catalog".into()),
                sts_url: sts_url.to_string(),
            });
        }
        // The file wins, as in the SDKs (EKS Pod Identity rotates it).
        let authorization = env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE")
            .map(ContainerAuth::TokenFile)
            .or_else(|| env("AWS_CONTAINER_AUTHORIZATION_TOKEN").map(ContainerAuth::Token));
        if let Some(uri) = env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") {
            return Some(Provider::Container {
                url: format!("http://169.254.170.2{uri}"),
                authorization,
            });
        }
        if let Some(url) = env("AWS_CONTAINER_CREDENTIALS_FULL_URI")
            && container_uri_allowed(&url)
        {
            return Some(Provider::Container { url, authorization });
        }
        if env("AWS_EC2_METADATA_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return None;
        }
        Some(Provider::Instance {
            endpoint: instance_endpoint(env),
        })
    }

    /// Fetches credentials and their expiry. Boxed: a role's fetch asks its base
    /// credentials, which may themselves be fetched ([`CredentialSource::current`]).
    fn fetch<'a>(&'a self, http: &'a reqwest::Client) -> FetchFuture<'a> {
        Box::pin(self.fetch_now(http))
    }

    async fn fetch_now(&self, http: &reqwest::Client) -> Result<(Credentials, Option<SystemTime>)> {
        match self {
            Provider::AssumeRole {
                base,
                role_arn,
                external_id,
                session_name,
                sts_url,
                region,
            } => {
                // The base may itself be temporary (a web identity, the instance).
                let credentials = base.current().await?;
                let mut form = vec![
                    ("Action", "AssumeRole"),
                    ("Version", "2011-06-15"),
                    ("RoleArn", role_arn.as_str()),
                    ("RoleSessionName", session_name.as_str()),
                ];
                if let Some(id) = external_id {
                    form.push(("ExternalId", id.as_str()));
                }
                let what = "STS AssumeRole";
                let mut request = http
                    .post(sts_url)
                    .form(&form)
                    .build()
                    .map_err(|e| unreachable(what, e))?;
                Signer {
                    region: region.clone(),
                    service: "sts".into(),
                    credentials,
                }
                .sign(&mut request, SystemTime::now())?;
                let body = respond(http.execute(request).await, what).await?;
                sts_credentials(&body)
            }
            Provider::WebIdentity {
                token_file,
                role_arn,
                session_name,
                sts_url,
            } => {
                let token = std::fs::read_to_string(token_file).map_err(|e| {
                    Error::config(format!(
                        "AWS_WEB_IDENTITY_TOKEN_FILE {token_file}: cannot read it: {e}"
                    ))
                })?;
                let form = [
                    ("Action", "AssumeRoleWithWebIdentity"),
                    ("Version", "2011-06-15"),
                    ("RoleArn", role_arn.as_str()),
                    ("RoleSessionName", session_name.as_str()),
                    ("WebIdentityToken", token.trim()),
                ];
                let body = answer(
                    http.post(sts_url).form(&form),
                    "STS AssumeRoleWithWebIdentity",
                )
                .await?;
                sts_credentials(&body)
            }
            Provider::Container { url, authorization } => {
                let mut request = http.get(url);
                match authorization {
                    Some(ContainerAuth::Token(t)) => request = request.header("Authorization", t),
                    Some(ContainerAuth::TokenFile(path)) => {
                        let t = std::fs::read_to_string(path).map_err(|e| {
                            Error::config(format!(
                                "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE {path}: cannot read it: {e}"
                            ))
                        })?;
                        request = request.header("Authorization", t.trim());
                    }
                    None => {}
                }
                let body = answer(request, "container credentials").await?;
                json_credentials(&body)
            }
            Provider::Instance { endpoint } => {
                let token = answer(
                    http.put(format!("{endpoint}/latest/api/token"))
                        .header("X-aws-ec2-metadata-token-ttl-seconds", "21600"),
                    "instance metadata token",
                )
                .await?;
                let base = format!("{endpoint}/latest/meta-data/iam/security-credentials/");
                let token = token.trim();
                let roles = answer(
                    http.get(&base).header("X-aws-ec2-metadata-token", token),
                    "instance role",
                )
                .await?;
                let role = roles
                    .lines()
                    .next()
                    .map(str::trim)
                    .filter(|r| !r.is_empty());
                let Some(role) = role else {
                    return Err(Error::config("the instance has no IAM role"));
                };
                let body = answer(
                    http.get(format!("{base}{role}"))
                        .header("X-aws-ec2-metadata-token", token),
                    "instance role credentials",
                )
                .await?;
                json_credentials(&body)
            }
        }
    }
}

/// The body of a successful answer; failures say what was asked (never the body of a
/// credentials answer).
async fn answer(request: reqwest::RequestBuilder, what: &str) -> Result<String> {
    respond(request.send().await, what).await
}

/// [`answer`] of a request already sent.
async fn respond(sent: reqwest::Result<reqwest::Response>, what: &str) -> Result<String> {
    let response = sent.map_err(|e| unreachable(what, e))?;
    let status = response.status();
    if !status.is_success() {
        // STS says why in an XML <Code> (no secret in it); throttling comes as 400 too,
        // so every failure here may pass.
        let body = response.text().await.unwrap_or_default();
        let code = xml_text(&body, "Code")
            .map(|c| format!(" ({c})"))
            .unwrap_or_default();
        return Err(Error::new(
            ErrorKind::Unavailable,
            format!("{what}: HTTP {status}{code}"),
        ));
    }
    response.text().await.map_err(|e| unreachable(what, e))
}

/// A transport failure with its causes (refused, timed out), without the URL.
fn unreachable(what: &str, e: reqwest::Error) -> Error {
    let e = e.without_url();
    let mut message = format!("{what}: {e}");
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        message.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    Error::new(ErrorKind::Unavailable, message)
}

/// Whether a full container credentials URI may receive the authorization token, as the
/// SDKs allow: https, or plain http to a loopback address or ECS's and EKS's own.
fn container_uri_allowed(uri: &str) -> bool {
    let Ok(url) = url::Url::parse(uri) else {
        tracing::warn!("AWS_CONTAINER_CREDENTIALS_FULL_URI is not a URL; ignored");
        return false;
    };
    let allowed = url.scheme() == "https"
        || match url.host() {
            Some(url::Host::Ipv4(ip)) => {
                ip.is_loopback()
                    || ip == std::net::Ipv4Addr::new(169, 254, 170, 2)
                    || ip == std::net::Ipv4Addr::new(169, 254, 170, 23)
            }
            Some(url::Host::Ipv6(ip)) => {
                ip.is_loopback() || ip.segments() == [0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x23]
            }
            Some(url::Host::Domain(d)) => d == "localhost",
            None => false,
        };
    if !allowed {
        tracing::warn!(
            "AWS_CONTAINER_CREDENTIALS_FULL_URI is plain http to a host that is not loopback, \
             ECS's or EKS's; ignored, as the AWS SDKs do"
        );
    }
    allowed
}

/// The credentials of a container or instance answer (`AccessKeyId`, `SecretAccessKey`,
/// `Token`, `Expiration` in RFC 3339).
fn json_credentials(body: &str) -> Result<(Credentials, Option<SystemTime>)> {
    let v: serde_json::Value =
        serde_json::from_str(body).map_err(|_| Error::internal("credentials answer: not JSON"))?;
    let field = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_string);
    let (Some(id), Some(secret)) = (field("AccessKeyId"), field("SecretAccessKey")) else {
        return Err(Error::internal(
            "credentials answer: no AccessKeyId and SecretAccessKey",
        ));
    };
    let expiry = field("Expiration").and_then(|e| parse_time(&e));
    Ok((
        Credentials {
            id,
            secret,
            token: field("Token"),
        },
        expiry,
    ))
}

/// The credentials of STS's XML answer.
fn sts_credentials(body: &str) -> Result<(Credentials, Option<SystemTime>)> {
    let (Some(id), Some(secret)) = (
        xml_text(body, "AccessKeyId"),
        xml_text(body, "SecretAccessKey"),
    ) else {
        return Err(Error::internal(
            "STS answer: no AccessKeyId and SecretAccessKey",
        ));
    };
    Ok((
        Credentials {
            id,
            secret,
            token: xml_text(body, "SessionToken"),
        },
        xml_text(body, "Expiration").and_then(|e| parse_time(&e)),
    ))
}

fn xml_text(body: &str, tag: &str) -> Option<String> {
    let start = body.find(&format!("<{tag}>"))? + tag.len() + 2;
    let end = start + body[start..].find(&format!("</{tag}>"))?;
    Some(body[start..end].trim().to_string())
}

fn parse_time(text: &str) -> Option<SystemTime> {
    chrono::DateTime::parse_from_rfc3339(text.trim())
        .ok()
        .map(SystemTime::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_names_the_provider_in_the_chains_order() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let web = Provider::from_env(
            env(&[
                ("AWS_WEB_IDENTITY_TOKEN_FILE", "/t"),
                ("AWS_ROLE_ARN", "arn:aws:iam::1:role/r"),
                ("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/creds"),
            ]),
            &regional_sts("eu-west-1"),
        );
        assert!(
            matches!(web, Some(Provider::WebIdentity { ref sts_url, .. }) if sts_url == "https://sts.eu-west-1.amazonaws.com")
        );
        let ecs = Provider::from_env(
            env(&[("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/c")]),
            "sts",
        );
        assert!(
            matches!(ecs, Some(Provider::Container { ref url, authorization: None }) if url == "http://169.254.170.2/v2/c")
        );
        let pod = Provider::from_env(
            env(&[
                (
                    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                    "http://169.254.170.23/v1/credentials",
                ),
                ("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "/var/run/token"),
            ]),
            "sts",
        );
        assert!(matches!(
            pod,
            Some(Provider::Container {
                authorization: Some(ContainerAuth::TokenFile(_)),
                ..
            })
        ));
        let imds = Provider::from_env(env(&[]), "sts");
        assert!(
            matches!(imds, Some(Provider::Instance { ref endpoint }) if endpoint == "http://169.254.169.254")
        );
        assert!(Provider::from_env(env(&[("AWS_EC2_METADATA_DISABLED", "true")]), "sts").is_none());
        assert_eq!(
            regional_sts("cn-north-1"),
            "https://sts.cn-north-1.amazonaws.com.cn"
        );
        // A plain-http full URI elsewhere never gets the token.
        assert!(container_uri_allowed("http://127.0.0.1:8080/creds"));
        assert!(container_uri_allowed(
            "http://169.254.170.23/v1/credentials"
        ));
        assert!(container_uri_allowed("https://creds.example.com/x"));
        assert!(!container_uri_allowed("http://creds.example.com/x"));
    }

    #[test]
    fn answers_are_parsed_with_their_expiry() {
        let (c, at) = json_credentials(
            r#"{"Code": "Success", "AccessKeyId": "ASIA1", "SecretAccessKey": "s", "Token": "t", "Expiration": "2026-12-01T21:00:00Z"}"#,
        )
        .unwrap();
        assert_eq!((c.id.as_str(), c.token.as_deref()), ("ASIA1", Some("t")));
        assert_eq!(at, parse_time("2026-12-01T21:00:00+00:00"));
        let xml = "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>\
                   <AccessKeyId>ASIA2</AccessKeyId><SecretAccessKey>s2</SecretAccessKey>\
                   <SessionToken>t2</SessionToken><Expiration>2026-12-01T22:00:00Z</Expiration>\
                   </Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>";
        let (c, at) = sts_credentials(xml).unwrap();
        assert_eq!((c.id.as_str(), c.secret.as_str()), ("ASIA2", "s2"));
        assert!(at.is_some());
        assert!(json_credentials(r#"{"Code": "Failure"}"#).is_err());
    }

    #[test]
    fn tcp_settings_take_benthos_defaults_for_zero_values() {
        let parse = |json: &str| serde_json::from_str::<TcpConfig>(json).unwrap();
        assert_eq!(
            tcp_settings(None),
            TcpSettings {
                connect_timeout: Duration::from_secs(2),
                keep_alive: None,
                user_timeout: None
            }
        );
        let rpcn_defaults = parse(
            r#"{"connect_timeout": "0s", "keep_alive": {"idle": "15s", "interval": "15s", "count": 9}, "tcp_user_timeout": "0s"}"#,
        );
        let fifteen = Duration::from_secs(15);
        assert_eq!(
            tcp_settings(Some(&rpcn_defaults)),
            TcpSettings {
                connect_timeout: Duration::from_secs(2),
                keep_alive: Some((fifteen, fifteen, 9)),
                user_timeout: None
            }
        );
        let set = parse(
            r#"{"connect_timeout": "300ms", "keep_alive": {"idle": "0s", "interval": "5s", "count": 0}, "tcp_user_timeout": "10s"}"#,
        );
        assert_eq!(
            tcp_settings(Some(&set)),
            TcpSettings {
                connect_timeout: Duration::from_millis(300),
                keep_alive: Some((fifteen, Duration::from_secs(5), 9)),
                user_timeout: Some(Duration::from_secs(10))
            }
        );
        let off = parse(r#"{"keep_alive": {"idle": "-1s"}}"#);
        assert_eq!(tcp_settings(Some(&off)).keep_alive, None);
        assert!(credentials_client(Some(&set)).is_ok());
    }

    #[test]
    fn temporary_credentials_are_fetched_again_well_before_they_expire() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let hour = Duration::from_secs(3600);
        assert_eq!(refresh_at(Some(now + hour), now), now + hour - MAX_MARGIN);
        let short = Duration::from_secs(10);
        assert_eq!(refresh_at(Some(now + short), now), now + short / 2);
        assert_eq!(refresh_at(Some(now), now + short), now);
        assert_eq!(refresh_at(None, now), now + hour);
    }
}
