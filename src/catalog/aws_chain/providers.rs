//! The sources of temporary credentials and how each is asked: STS (a role, web
//! identity), the container endpoint and instance metadata, over a client with the
//! configured TCP settings; and the shared credentials file.

use super::*;

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

impl Provider {
    /// The provider the environment names, in the chain's order (web identity, through
    /// STS at `sts_url`; container; instance); `None` when instance metadata is disabled
    /// and nothing else is set.
    pub(super) fn from_env(
        env: impl Fn(&str) -> Option<String>,
        sts_url: &str,
    ) -> Option<Provider> {
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
    pub(super) fn fetch<'a>(&'a self, http: &'a reqwest::Client) -> FetchFuture<'a> {
        Box::pin(self.fetch_now(http))
    }

    pub(super) async fn fetch_now(
        &self,
        http: &reqwest::Client,
    ) -> Result<(Credentials, Option<SystemTime>)> {
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

/// STS's endpoint in a region.
pub(super) fn regional_sts(region: &str) -> String {
    let suffix = match region.starts_with("cn-") {
        true => "amazonaws.com.cn",
        false => "amazonaws.com",
    };
    format!("https://sts.{region}.{suffix}")
}

/// The instance metadata service's address (`AWS_EC2_METADATA_SERVICE_ENDPOINT`).
pub(super) fn instance_endpoint(env: impl Fn(&str) -> Option<String>) -> String {
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
pub(super) struct TcpSettings {
    pub(super) connect_timeout: Duration,
    pub(super) keep_alive: Option<(Duration, Duration, u32)>,
    pub(super) user_timeout: Option<Duration>,
}

pub(super) fn tcp_settings(tcp: Option<&TcpConfig>) -> TcpSettings {
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
pub(super) fn credentials_client(tcp: Option<&TcpConfig>) -> Result<reqwest::Client> {
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
pub(super) fn shared_file_credentials(profile: &str) -> Option<Credentials> {
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

/// Whether a full container credentials URI may receive the authorization token, as the
/// SDKs allow: https, or plain http to a loopback address or ECS's and EKS's own.
pub(super) fn container_uri_allowed(uri: &str) -> bool {
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
