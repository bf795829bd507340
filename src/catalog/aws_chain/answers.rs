//! Reading the credential endpoints' answers: the container endpoint's and instance
//! metadata's JSON, STS's XML, and the errors of endpoints that do not answer.

use super::*;

/// The body of a successful answer; failures say what was asked (never the body of a
/// credentials answer).
pub(super) async fn answer(request: reqwest::RequestBuilder, what: &str) -> Result<String> {
    respond(request.send().await, what).await
}

/// [`answer`] of a request already sent.
pub(super) async fn respond(
    sent: reqwest::Result<reqwest::Response>,
    what: &str,
) -> Result<String> {
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
pub(super) fn unreachable(what: &str, e: reqwest::Error) -> Error {
    let e = e.without_url();
    let mut message = format!("{what}: {e}");
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        message.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    Error::new(ErrorKind::Unavailable, message)
}

/// The credentials of a container or instance answer (`AccessKeyId`, `SecretAccessKey`,
/// `Token`, `Expiration` in RFC 3339).
pub(super) fn json_credentials(body: &str) -> Result<(Credentials, Option<SystemTime>)> {
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
pub(super) fn sts_credentials(body: &str) -> Result<(Credentials, Option<SystemTime>)> {
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

pub(super) fn xml_text(body: &str, tag: &str) -> Option<String> {
    let start = body.find(&format!("<{tag}>"))? + tag.len() + 2;
    let end = start + body[start..].find(&format!("</{tag}>"))?;
    Some(body[start..end].trim().to_string())
}

pub(super) fn parse_time(text: &str) -> Option<SystemTime> {
    chrono::DateTime::parse_from_rfc3339(text.trim())
        .ok()
        .map(SystemTime::from)
}
