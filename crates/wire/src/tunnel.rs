//! HTTP/1.1 upgrades (WebSocket): detect them, and once both sides have switched protocols,
//! copy bytes both ways until either closes.

use http::header;
use http::Request;

/// True for a request asking to switch protocols (`Connection: upgrade` + `Upgrade`).
pub fn is_upgrade<B>(req: &Request<B>) -> bool {
    req.headers().contains_key(header::UPGRADE)
        && req
            .headers()
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| {
                v.split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
            })
}

/// Copy bytes between the client's and the upstream's upgraded connections until either side
/// closes. `route` names the route in the log lines.
pub async fn copy_both_ways(
    client: hyper::upgrade::OnUpgrade,
    upstream: hyper::upgrade::OnUpgrade,
    route: String,
) {
    match tokio::try_join!(client, upstream) {
        Ok((client_io, upstream_io)) => {
            let mut c = hyper_util::rt::TokioIo::new(client_io);
            let mut u = hyper_util::rt::TokioIo::new(upstream_io);
            if let Err(e) = tokio::io::copy_bidirectional(&mut c, &mut u).await {
                tracing::debug!(target: "cachekeeper::server", route = %route, error = %e, "upgraded tunnel closed");
            }
        }
        Err(e) => {
            tracing::warn!(target: "cachekeeper::server", route = %route, error = %e, "upgrade failed");
        }
    }
}
