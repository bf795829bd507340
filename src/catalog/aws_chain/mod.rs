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
//!
//! Each source's fetch is in `providers`; reading the answers (JSON, STS's XML) in
//! `answers`.

use std::time::{Duration, SystemTime};

use tokio::sync::Mutex;

use super::sigv4::{Credentials, Signer, from_env, from_shared_file};
use crate::config::{SigV4Config, TcpConfig};
use crate::error::{Error, ErrorKind, Result};

mod answers;
mod providers;
#[cfg(test)]
mod tests;

use answers::*;
use providers::*;

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
