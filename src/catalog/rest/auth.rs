//! How the client proves who it is: a bearer token, OAuth2 client credentials (fetched
//! and refreshed before they expire), or SigV4-signed requests; and the secrets every
//! error is scrubbed of.

use super::*;

pub(super) enum Auth {
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
pub(super) struct TokenResponse {
    pub(super) access_token: String,
    pub(super) expires_in: Option<u64>,
}

/// How long before an OAuth2 token expires floe fetches the next: 30 s, or half the
/// life of short-lived tokens (a fresh token per call would double the calls).
pub(super) fn token_margin(lifetime: Duration) -> Duration {
    (lifetime / 2).min(Duration::from_secs(30))
}

impl RestCatalog {
    pub(super) async fn token(&self, force_refresh: bool) -> Result<Option<String>> {
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

    pub(super) async fn fetch_token(&self, config: &OAuth2Config) -> Result<(String, Instant)> {
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
}

/// The auth of `catalog.auth.aws_sigv4` (its secrets are registered for redaction when
/// first used).
pub(super) async fn sigv4_auth(config: &SigV4Config) -> Result<Auth> {
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

/// Secret strings to scrub from error messages (tokens fetched later are added).
#[derive(Default)]
pub(super) struct Secrets {
    pub(super) configured: std::sync::Mutex<Vec<String>>,
    /// Vended storage credentials, newest last: a catalog may mint new ones with every
    /// load, so only the last [`VENDED_SECRETS_KEPT`] are kept.
    pub(super) vended: std::sync::Mutex<std::collections::VecDeque<String>>,
}

pub(super) const VENDED_SECRETS_KEPT: usize = 64;

impl Secrets {
    pub(super) fn add(&self, secret: &str) {
        // Very short values (e.g. a header "1") would redact ordinary words.
        if secret.len() >= 4 {
            let mut list = self.configured.locked();
            if !list.iter().any(|s| s == secret) {
                list.push(secret.to_string());
            }
        }
    }

    pub(super) fn add_vended(&self, secret: &str) {
        let mut list = self.vended.locked();
        if secret.len() >= 4 && !list.iter().any(|s| s == secret) {
            if list.len() == VENDED_SECRETS_KEPT {
                list.pop_front();
            }
            list.push_back(secret.to_string());
        }
    }

    pub(super) fn scrub(&self, mut text: String) -> String {
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
