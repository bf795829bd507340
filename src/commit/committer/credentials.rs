//! Keeping a table's vended storage credentials fresh.
//!
//! A REST catalog may hand out short-lived storage credentials with each table it
//! loads (`storage-credentials` in the answer). A writer that runs for hours outlives
//! them, so each table whose catalog vends credentials gets a refresher task: it loads
//! the table again before the credentials expire (and at once when storage refuses
//! them), builds a new `FileIO` from the fresh ones and swaps it into the committer's
//! view. Only the `FileIO` is swapped: the table the reload returned may be older than
//! the committer's own head (a commit may land meanwhile), so it is not published.
//!
//! Calls that failed on refused credentials are retried by the host (storage failures
//! fail the whole call as retryable), by then with the new credentials.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{Notify, watch};

use super::TableView;
use crate::catalog::Catalog;
use crate::error::Error;
use crate::storage::{credentials_expiry, has_vended_credentials, table_file_io};

/// Refresh this long before the announced expiry, at most: long enough for a slow
/// catalog, short enough not to reload often for credentials that live an hour.
const MAX_MARGIN: Duration = Duration::from_secs(300);

/// The least time between two refreshes, so credentials that arrive already expired
/// (a clock that runs ahead) or are refused at once do not make a busy loop.
const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// Wakes the refresher when storage refuses the current credentials. Cheap to clone;
/// inert for tables without vended credentials.
#[derive(Clone, Default)]
pub(crate) struct Refusals(Option<Arc<Notify>>);

impl Refusals {
    /// Looks at a failure: if storage refused the credentials, asks for new ones.
    pub(crate) fn note(&self, e: &Error) {
        if let Some(nudge) = &self.0
            && crate::storage::is_credential_refusal(e)
        {
            tracing::info!(
                "storage refused the table's vended credentials; asking the catalog for new ones"
            );
            nudge.notify_one();
        }
    }
}

/// Starts the refresher when the table's catalog vended credentials; the returned
/// handle wakes it on refusals. It stops when the committer's view is dropped.
pub(super) fn start_refresher(
    catalog: Arc<dyn Catalog>,
    view: watch::Sender<Arc<TableView>>,
    configured: HashMap<String, String>,
) -> Refusals {
    let props = view.borrow().table.io_props.clone();
    if !has_vended_credentials(&props) {
        return Refusals(None);
    }
    let nudge = Arc::new(Notify::new());
    let refresher = Refresher {
        catalog,
        view,
        configured,
        nudge: nudge.clone(),
    };
    tokio::spawn(refresher.run(credentials_expiry(&props)));
    Refusals(Some(nudge))
}

struct Refresher {
    catalog: Arc<dyn Catalog>,
    view: watch::Sender<Arc<TableView>>,
    configured: HashMap<String, String>,
    nudge: Arc<Notify>,
}

impl Refresher {
    async fn run(self, mut expiry: Option<SystemTime>) {
        let mut received = SystemTime::now();
        let mut last = Instant::now();
        let mut current = self.view.borrow().table.io_props.clone();
        // Reloads in a row that brought the same credentials back (a catalog that caches
        // them): the next one waits longer instead of reloading every second until they
        // expire.
        let mut unchanged = 0;
        loop {
            let wait = refresh_in(expiry, received, SystemTime::now())
                .map(|w| w.max(unchanged_backoff(unchanged)));
            tokio::select! {
                _ = self.view.closed() => return,
                _ = sleep_or_forever(wait) => {}
                _ = self.nudge.notified() => {}
            }
            // Refusals that queue up while a refresh is under way are answered by it; a
            // catalog that keeps sending the same credentials is asked less and less.
            let least = MIN_INTERVAL.max(unchanged_backoff(unchanged));
            tokio::time::sleep(least.saturating_sub(last.elapsed())).await;
            let Some(props) = self.fresh_props().await else {
                return;
            };
            last = Instant::now();
            if props == current {
                unchanged += 1;
                continue;
            }
            unchanged = 0;
            received = SystemTime::now();
            expiry = credentials_expiry(&props).filter(|at| *at > received);
            if expiry.is_none() && credentials_expiry(&props).is_some() {
                // Clock skew, or seconds sent as milliseconds: refreshing "now" for ever
                // would reload the table every second. Storage's refusal says when.
                tracing::warn!(
                    "the vended storage credentials expired before they arrived; floe renews them when storage refuses them"
                );
            }
            if !has_vended_credentials(&props) {
                tracing::warn!(
                    "the catalog vended no storage credentials this time; using the configured storage credentials"
                );
            }
            let location = self.view.borrow().table.metadata.location().to_string();
            let file_io = table_file_io(&self.configured, &props, &location);
            current = props;
            self.view
                .send_modify(|v| *v = Arc::new(v.with_file_io(file_io)));
            tracing::debug!("vended storage credentials refreshed (expiry {expiry:?})");
        }
    }

    /// The table's properties from a fresh load (without credentials when the catalog
    /// stopped vending them: the configured ones then serve), retried with backoff while
    /// the catalog fails; `None` once the committer is gone.
    async fn fresh_props(&self) -> Option<HashMap<String, String>> {
        let ident = self.view.borrow().table.ident.clone();
        let mut attempt = 0;
        loop {
            let failure = tokio::select! {
                _ = self.view.closed() => return None,
                loaded = self.catalog.load_table(&ident) => match loaded {
                    Ok(Some(table)) => return Some(table.io_props),
                    Ok(None) => format!("table {ident} is gone"),
                    Err(e) => e.to_string(),
                },
            };
            tracing::warn!("refreshing storage credentials for {ident}: {failure}");
            attempt += 1;
            let wait = super::backoff::backoff(attempt).max(MIN_INTERVAL);
            tokio::select! {
                _ = self.view.closed() => return None,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }
}

/// How long until credentials received at `received` that expire at `expiry` should be
/// replaced: half their lifetime before expiry, at most [`MAX_MARGIN`] before.
/// `None` (no announced expiry) waits for a refusal.
fn refresh_in(
    expiry: Option<SystemTime>,
    received: SystemTime,
    now: SystemTime,
) -> Option<Duration> {
    let expiry = expiry?;
    let lifetime = expiry.duration_since(received).unwrap_or_default();
    let margin = (lifetime / 2).min(MAX_MARGIN);
    let due = expiry.checked_sub(margin).unwrap_or(expiry);
    Some(due.duration_since(now).unwrap_or_default())
}

/// The least wait after `n` reloads in a row brought the same credentials back: none
/// at first, then 2 s doubling up to a minute.
fn unchanged_backoff(n: u32) -> Duration {
    match n {
        0 => Duration::ZERO,
        n => (Duration::from_secs(1) * 2u32.saturating_pow(n.min(6))).min(Duration::from_secs(60)),
    }
}

async fn sleep_or_forever(wait: Option<Duration>) {
    match wait {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_refreshed_well_before_they_expire() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let secs = Duration::from_secs;
        // An hour's credentials: five minutes before the end.
        assert_eq!(refresh_in(Some(t0 + secs(3600)), t0, t0), Some(secs(3300)));
        // Short-lived ones: at half their life.
        assert_eq!(refresh_in(Some(t0 + secs(10)), t0, t0), Some(secs(5)));
        assert_eq!(
            refresh_in(Some(t0 + secs(10)), t0, t0 + secs(4)),
            Some(secs(1))
        );
        // Due: now.
        assert_eq!(
            refresh_in(Some(t0 + secs(10)), t0, t0 + secs(9)),
            Some(secs(0))
        );
        assert_eq!(
            refresh_in(Some(t0), t0 + secs(5), t0 + secs(5)),
            Some(secs(0))
        );
        // No expiry announced: only on a refusal.
        assert_eq!(refresh_in(None, t0, t0), None);
        // The same credentials back again: waits that grow, not a reload a second.
        assert_eq!(unchanged_backoff(0), Duration::ZERO);
        assert_eq!(unchanged_backoff(1), secs(2));
        assert_eq!(unchanged_backoff(5), secs(32));
        assert_eq!(unchanged_backoff(40), secs(60));
    }

    #[test]
    fn only_refusals_by_storage_wake_the_refresher() {
        let nudge = Arc::new(Notify::new());
        let refusals = Refusals(Some(nudge.clone()));
        refusals.note(&Error::internal(
            "Unexpected => S3Error { code: \"InvalidAccessKeyId\" }",
        ));
        let woken = nudge.notified();
        tokio::pin!(woken);
        assert!(futures::FutureExt::now_or_never(woken.as_mut()).is_some());
        refusals.note(&Error::internal("connection refused"));
        let idle = nudge.notified();
        tokio::pin!(idle);
        assert!(futures::FutureExt::now_or_never(idle.as_mut()).is_none());
    }
}
