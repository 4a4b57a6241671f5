//! `[state] ca_file`: the PEM CA bundle a `rediss://` connection verifies the Redis server's
//! certificate with (`docs/state.md#redis`). Unset, the platform's roots are used (the `redis`
//! crate loads them with `rustls-native-certs`); set, **only** the bundle's certificates are
//! trusted (the crate's [`::redis::TlsCertificates::root_cert`] replaces the platform roots).
//!
//! The bundle is read and checked twice: when the config loads ([`read_ca`], so `check`, a
//! start and a reload name an unusable file up front), and when the backend opens (the file
//! it connects with).

use std::path::Path;

/// Most bytes a CA bundle may have. The largest public bundles (Mozilla's, ~150
/// certificates) are about 220 KiB; anything past 4 MiB is not a CA bundle.
pub(crate) const MAX_CA_BYTES: u64 = 4 * 1024 * 1024;

/// Read `path` as a PEM CA bundle: at least one `CERTIFICATE` block, each a certificate
/// rustls accepts as a trust anchor. Returns the file's bytes (what the client is given).
///
/// Errors (the message names the path and what is wrong, never the file's content): the file
/// cannot be read, is larger than [`MAX_CA_BYTES`], a PEM block does not decode, it holds no
/// certificate, or a certificate is not a usable trust anchor.
pub(crate) fn read_ca(path: &Path) -> Result<Vec<u8>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;

    let shown = path.display();
    let len = std::fs::metadata(path)
        .map_err(|e| format!("[state] ca_file {shown}: cannot read it: {e}"))?
        .len();
    if len > MAX_CA_BYTES {
        return Err(format!(
            "[state] ca_file {shown}: {len} bytes is not a CA bundle (at most {MAX_CA_BYTES})"
        ));
    }
    let pem =
        std::fs::read(path).map_err(|e| format!("[state] ca_file {shown}: cannot read it: {e}"))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert
            .map_err(|e| format!("[state] ca_file {shown}: not a PEM certificate bundle: {e}"))?;
        roots.add(cert).map_err(|e| {
            format!("[state] ca_file {shown}: a certificate is not a usable CA: {e}")
        })?;
    }
    if roots.is_empty() {
        return Err(format!(
            "[state] ca_file {shown}: no PEM certificate in it (expected -----BEGIN \
             CERTIFICATE----- blocks)"
        ));
    }
    Ok(pem)
}

/// A client for `url` (`rediss://`) that trusts only the certificates of `ca_pem` (checked
/// by [`read_ca`]).
pub(crate) fn client_with_ca(url: &str, ca_pem: Vec<u8>) -> ::redis::RedisResult<::redis::Client> {
    ::redis::Client::build_with_tls(
        url,
        ::redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(ca_pem),
        },
    )
}

/// The message of a failed first contact with `where_` (the URL, redacted): the client's
/// error, and for a certificate the server presented that was not trusted, which CAs were
/// asked (`ca_file`'s, or the platform's) and what to change.
pub(crate) fn explain(
    where_: &str,
    opts: &super::RedisOptions,
    e: &dyn std::fmt::Display,
) -> String {
    let text = e.to_string();
    let untrusted = opts.url.is_tls()
        && [
            "certificate",
            "UnknownIssuer",
            "NotValidForName",
            "BadSignature",
        ]
        .iter()
        .any(|w| text.contains(w));
    if !untrusted {
        return format!("{where_}: {text}");
    }
    match &opts.ca_file {
        Some(path) => format!(
            "{where_}: {text} (the server's TLS certificate does not verify against [state] \
             ca_file {}: it must hold the CA that signed the server's certificate, and the \
             certificate must name the URL's host)",
            path.display()
        ),
        None => format!(
            "{where_}: {text} (the server's TLS certificate does not verify against the \
             platform's roots: set [state] ca_file to the CA that signed it)"
        ),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use super::super::test_server::{RedisServer, TestCa};
    use super::super::{RedisBackend, RedisOptions, RedisUrl};
    use super::*;

    #[test]
    fn an_unusable_bundle_is_refused_naming_the_path_and_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.pem");
        let err = read_ca(&missing).unwrap_err();
        assert!(
            err.contains("nope.pem") && err.contains("cannot read"),
            "{err}"
        );
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "just text\n").unwrap();
        let err = read_ca(&empty).unwrap_err();
        assert!(err.contains("no PEM certificate"), "{err}");
        let broken = dir.path().join("broken.pem");
        std::fs::write(
            &broken,
            "-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let err = read_ca(&broken).unwrap_err();
        assert!(err.contains("broken.pem"), "{err}");
        // Valid base64 that is no certificate.
        let junk = dir.path().join("junk.pem");
        std::fs::write(
            &junk,
            "-----BEGIN CERTIFICATE-----\naGVsbG8gd29ybGQ=\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let err = read_ca(&junk).unwrap_err();
        assert!(
            err.contains("junk.pem") && err.contains("not a usable CA"),
            "{err}"
        );
        let dir_as_file = read_ca(dir.path()).unwrap_err();
        assert!(dir_as_file.contains("ca_file"), "{dir_as_file}");
    }

    fn opts(server: &RedisServer, ca_file: Option<std::path::PathBuf>) -> RedisOptions {
        RedisOptions {
            url: server.url(0),
            read_timeout: Duration::from_secs(10),
            retention_days: 0,
            ca_file,
        }
    }

    /// A server whose certificate another CA signed (or that the platform's roots do not
    /// know) is refused at open, with a message that says what to fix; a store opened on it
    /// runs in memory and still stores and answers.
    #[test]
    fn a_server_certificate_of_another_ca_fails_to_open_clearly_and_the_store_serves_on_memory() {
        let right = TestCa::generate();
        let wrong = TestCa::generate();
        let server = RedisServer::start_tls(&right);
        // The right CA connects.
        RedisBackend::open(&opts(&server, Some(right.ca()))).unwrap();
        let err = RedisBackend::open(&opts(&server, Some(wrong.ca())))
            .err()
            .expect("another CA's certificate is not trusted");
        let text = err.to_string();
        let url = server.url(0);
        assert!(text.contains(url.redacted()), "{text}");
        assert!(
            text.contains("does not verify against [state] ca_file")
                && text.contains(&wrong.ca().display().to_string()),
            "{text}"
        );
        // The platform's roots do not know the test CA either.
        let text = RedisBackend::open(&opts(&server, None))
            .err()
            .expect("not a platform root")
            .to_string();
        assert!(text.contains("platform's roots"), "{text}");
        // Plain redis:// to a TLS-only port does not open (and says nothing about CAs).
        let plain = RedisUrl::parse(&format!("redis://127.0.0.1:{}/0", server.port())).unwrap();
        assert!(RedisBackend::open(&RedisOptions {
            url: plain,
            ..opts(&server, None)
        })
        .is_err());

        let store_opts = crate::StoreOptions {
            path: std::path::PathBuf::from("/nonexistent/unused.db"),
            redis: Some(opts(&server, Some(wrong.ca()))),
            retention_days: 0,
            max_bytes: u64::MAX,
            cache_bytes: crate::DEFAULT_CACHE_BYTES,
        };
        let store = crate::Store::open(&store_opts);
        assert!(!store.is_durable(), "on memory");
        let r = crate::Record::new(crate::Kind::Session, "s", "k", b"v".to_vec());
        store.put(r.clone());
        assert_eq!(store.get(&r.key, Duration::from_secs(1)), Some(r));
        // Nothing reached the server.
        let keys: Vec<String> = ::redis::cmd("KEYS")
            .arg("*")
            .query(&mut server.raw())
            .unwrap();
        assert!(keys.is_empty(), "{keys:?}");
    }
}
