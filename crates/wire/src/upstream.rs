//! The pooled upstream client and header hygiene. Knows nothing about LLMs.
//!
//! - TLS by rustls (ring) through hyper-rustls: the platform's native roots plus an optional
//!   `[server] ca_file`; ALPN offers HTTP/2 and HTTP/1.1.
//! - `http://` upstreams are allowed (local servers, tests).
//! - `HTTPS_PROXY` / `HTTP_PROXY` / `NO_PROXY` are honoured (hyper-util's matcher) by a CONNECT
//!   tunnel through an `http://` proxy.
//! - Connections are pooled by hyper-util's legacy client.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName};
use http::Uri;
use http_body_util::combinators::UnsyncBoxBody;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

/// Boxed error type for bodies and connectors.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The request body type sent upstream: buffered bytes or the client's stream.
pub type UpstreamBody = UnsyncBoxBody<Bytes, BoxError>;

/// The pooled client.
pub type HttpClient = Client<HttpsConnector<ProxyConnector>, UpstreamBody>;

/// Why the client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientBuildError {
    #[error("cannot read ca_file {path}: {source}")]
    CaFile {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("ca_file {path} holds no usable certificate: {detail}")]
    CaCert { path: String, detail: String },
    #[error("TLS setup failed: {0}")]
    Tls(String),
}

/// Build the pooled upstream client.
///
/// `connect_timeout` bounds TCP connect (TLS handshake included in the overall
/// connect phase). `ca_file` adds PEM roots to the native ones.
pub fn build_client(
    connect_timeout: Duration,
    ca_file: Option<&Path>,
) -> Result<HttpClient, ClientBuildError> {
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for cert in native.certs {
        // A platform root rustls cannot parse is skipped, as browsers do.
        let _ = roots.add(cert);
    }
    if let Some(path) = ca_file {
        let pem = std::fs::read(path).map_err(|source| ClientBuildError::CaFile {
            path: path.display().to_string(),
            source,
        })?;
        let mut added = 0usize;
        for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
            let cert = cert.map_err(|e| ClientBuildError::CaCert {
                path: path.display().to_string(),
                detail: e.to_string(),
            })?;
            roots.add(cert).map_err(|e| ClientBuildError::CaCert {
                path: path.display().to_string(),
                detail: e.to_string(),
            })?;
            added += 1;
        }
        if added == 0 {
            return Err(ClientBuildError::CaCert {
                path: path.display().to_string(),
                detail: "no PEM certificate found".into(),
            });
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientBuildError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();

    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(connect_timeout));
    http.set_nodelay(true);
    let proxied = ProxyConnector {
        direct: http,
        matcher: Arc::new(Matcher::from_env()),
    };
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(proxied);
    Ok(Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .build(https))
}

/// A connector that goes direct, or through a CONNECT tunnel when the environment's proxy
/// settings (`HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY`) say so.
#[derive(Clone)]
pub struct ProxyConnector {
    direct: HttpConnector,
    matcher: Arc<Matcher>,
}

impl tower_service::Service<Uri> for ProxyConnector {
    type Response = TokioIo<TcpStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.direct.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        match self.matcher.intercept(&dst) {
            Some(intercept) => {
                let mut tunnel = Tunnel::new(intercept.uri().clone(), self.direct.clone());
                if let Some(auth) = intercept.basic_auth() {
                    tunnel = tunnel.with_auth(auth.clone());
                }
                // The tunnel defaults a missing port to 443; give http:// targets 80.
                let dst = with_default_port(dst);
                Box::pin(async move { tunnel.call(dst).await.map_err(Into::into) })
            }
            None => {
                let fut = self.direct.call(dst);
                Box::pin(async move { fut.await.map_err(Into::into) })
            }
        }
    }
}

fn with_default_port(dst: Uri) -> Uri {
    if dst.port().is_some() || dst.scheme_str() != Some("http") {
        return dst;
    }
    let Some(host) = dst.host() else { return dst };
    let authority = format!("{host}:80");
    let mut parts = dst.clone().into_parts();
    match authority.parse() {
        Ok(a) => {
            parts.authority = Some(a);
            Uri::from_parts(parts).unwrap_or(dst)
        }
        Err(_) => dst,
    }
}

/// Hop-by-hop headers (RFC 9110 §7.6.1), never forwarded in either direction. Names, not
/// strings: removing by `&str` parses the name again on every request and response.
static HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Prefix of headers addressed to the proxy itself; they never leave it.
pub(crate) const PROXY_HEADER_PREFIX: &str = "x-cachekeeper-";

/// Remove hop-by-hop headers (and any header the `connection` header names) in place.
/// With `keep_upgrade`, `connection` and `upgrade` stay (WebSocket tunnelling).
pub fn strip_hop_by_hop(headers: &mut HeaderMap, keep_upgrade: bool) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .filter(|n| !(keep_upgrade && n == header::UPGRADE))
        .collect();
    for n in named {
        headers.remove(n);
    }
    for h in &HOP_BY_HOP {
        if keep_upgrade && (h == header::CONNECTION || h == header::UPGRADE) {
            continue;
        }
        headers.remove(h);
    }
}

/// Prepare client request headers for the upstream: hop-by-hop and `x-cachekeeper-*`
/// dropped, `host` removed (the client sets it from the upstream URI), every other header
/// (credentials included) kept untouched.
pub fn upstream_request_headers(headers: &mut HeaderMap, keep_upgrade: bool) {
    strip_hop_by_hop(headers, keep_upgrade);
    headers.remove(header::HOST);
    let ours: Vec<HeaderName> = headers
        .keys()
        .filter(|k| k.as_str().starts_with(PROXY_HEADER_PREFIX))
        .cloned()
        .collect();
    for k in ours {
        headers.remove(k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_and_proxy_headers_are_dropped_credentials_kept() {
        let mut h = HeaderMap::new();
        h.insert("connection", "keep-alive, x-foo".parse().unwrap());
        h.insert("x-foo", "1".parse().unwrap());
        h.insert("keep-alive", "timeout=5".parse().unwrap());
        h.insert("transfer-encoding", "chunked".parse().unwrap());
        h.insert("host", "127.0.0.1:8787".parse().unwrap());
        h.insert("x-api-key", "sk-ant-secret".parse().unwrap());
        h.insert("authorization", "Bearer sk-secret".parse().unwrap());
        h.insert("x-cachekeeper-token", "t".parse().unwrap());
        h.insert("anthropic-beta", "a,b".parse().unwrap());
        upstream_request_headers(&mut h, false);
        let mut keys: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        keys.sort();
        assert_eq!(keys, vec!["anthropic-beta", "authorization", "x-api-key"]);
        assert_eq!(h["x-api-key"], "sk-ant-secret");
    }

    #[test]
    fn every_hop_by_hop_header_is_dropped_in_any_case() {
        let mut h = HeaderMap::new();
        for name in [
            "Connection",
            "Keep-Alive",
            "Proxy-Connection",
            "Proxy-Authenticate",
            "Proxy-Authorization",
            "TE",
            "Trailer",
            "Transfer-Encoding",
            "Upgrade",
        ] {
            h.insert(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                "x".parse().unwrap(),
            );
        }
        h.insert("x-kept", "1".parse().unwrap());
        strip_hop_by_hop(&mut h, false);
        let keys: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(keys, vec!["x-kept"]);
    }

    #[test]
    fn upgrade_headers_kept_for_websocket() {
        let mut h = HeaderMap::new();
        h.insert("connection", "Upgrade".parse().unwrap());
        h.insert("upgrade", "websocket".parse().unwrap());
        upstream_request_headers(&mut h, true);
        assert_eq!(h["upgrade"], "websocket");
        assert_eq!(h["connection"], "Upgrade");
    }

    #[test]
    fn default_port_for_tunnelled_http() {
        let u: Uri = "http://example.com/x".parse().unwrap();
        assert_eq!(with_default_port(u).port_u16(), Some(80));
        let u: Uri = "https://example.com/x".parse().unwrap();
        assert_eq!(with_default_port(u).port_u16(), None);
    }
}
