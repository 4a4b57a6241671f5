//! The dashboard at `/_cachekeeper/` (being built): recent sessions and, per session, a chart
//! per turn of uncached / cache-read / cache-write tokens.

use std::time::Duration;

use bytes::Bytes;

use crate::accounting::pricing::Pricing;
use crate::state::Store;

/// How long a dashboard request waits for the store's records, ms.
const READ_TIMEOUT: Duration = Duration::from_millis(2000);

/// Answer a dashboard request: `path` is the part after `/_cachekeeper` (`/`, `/app.js`,
/// `/api/sessions`, ...). Reads the store through its writer thread: call it off the async
/// threads. (A stub until the page lands: the number of stored turns, as JSON.)
#[allow(dead_code)] // wired by the reserved-path dispatch
pub(crate) fn serve(
    store: &Store,
    _pricing: &Pricing,
    _path: &str,
    _query: Option<&str>,
) -> http::Response<Bytes> {
    let turns = crate::accounting::record::load_turns(store, READ_TIMEOUT);
    let mut r = http::Response::new(Bytes::from(format!("{{\"turns\":{}}}", turns.len())));
    *r.status_mut() = http::StatusCode::NOT_FOUND;
    r
}
