//! A throwaway `redis-server` for the tests: Debian's binary on a free loopback port (never
//! 6379), no persistence (`--save '' --appendonly no`), killed when dropped. A machine without
//! `redis-server` fails the test that needs it, with the install command; it never skips.
//!
//! [`RedisServer::start_tls`] serves TLS only (`--port 0 --tls-port PORT`) with a certificate
//! of a throwaway CA ([`TestCa`], made with the `openssl` command-line tool).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    clippy::disallowed_macros
)]

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::RedisUrl;

/// How long a started server may take to answer `PING`.
const START_WAIT: Duration = Duration::from_secs(20);

/// A throwaway certificate authority and a server certificate it signed (for `127.0.0.1` and
/// `localhost`, valid two days), as PEM files in a temporary folder; made with `openssl`.
pub struct TestCa {
    dir: tempfile::TempDir,
}

impl TestCa {
    /// Generate a CA (P-256 keys: fast to make, accepted by rustls and Redis's OpenSSL) and a
    /// server certificate signed by it.
    pub fn generate() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(dir.path())
                .output()
                .unwrap_or_else(|e| panic!("cannot run openssl (apt-get install openssl): {e}"));
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let key = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        openssl(
            &[
                &["req", "-x509"][..],
                &key,
                &["-keyout", "ca.key", "-out", "ca.pem", "-days", "2"],
                &["-subj", "/CN=cachekeeper test CA"],
                &["-addext", "basicConstraints=critical,CA:TRUE"],
                &["-addext", "keyUsage=critical,keyCertSign,cRLSign"],
            ]
            .concat(),
        );
        openssl(
            &[
                &["req"][..],
                &key,
                &["-keyout", "server.key", "-out", "server.csr"],
                &["-subj", "/CN=localhost"],
            ]
            .concat(),
        );
        std::fs::write(
            dir.path().join("server.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
             keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ]);
        Self { dir }
    }

    /// The CA's certificate (what `[state] ca_file` names).
    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// A running `redis-server`, killed on drop.
pub struct RedisServer {
    child: Child,
    port: u16,
    /// Serving TLS only: the CA file that verifies its certificate.
    tls_ca: Option<PathBuf>,
    /// The `redis-server` arguments it was started with ([`Self::restart`]).
    args: Vec<std::ffi::OsString>,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    /// Start one with the default settings.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Start one with `extra` arguments (`--enable-debug-command yes`, ...).
    pub fn start_with(extra: &[&str]) -> Self {
        Self::start_retrying(extra, None)
    }

    /// Start one serving TLS only, with `ca`'s server certificate; clients are not asked for
    /// a certificate (`--tls-auth-clients no`).
    pub fn start_tls(ca: &TestCa) -> Self {
        Self::start_retrying(&[], Some(ca))
    }

    fn start_retrying(extra: &[&str], tls: Option<&TestCa>) -> Self {
        for _ in 0..5 {
            if let Some(s) = Self::try_start(extra, tls) {
                return s;
            }
        }
        panic!("redis-server did not start on a free loopback port after 5 tries");
    }

    fn try_start(extra: &[&str], tls: Option<&TestCa>) -> Option<Self> {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        assert_ne!(port, 6379);
        let dir = tempfile::tempdir().unwrap();
        let mut args: Vec<std::ffi::OsString> = Vec::new();
        let mut push = |a: &dyn AsRef<std::ffi::OsStr>| args.push(a.as_ref().to_owned());
        match tls {
            None => {
                push(&"--port");
                push(&port.to_string());
            }
            Some(ca) => {
                for a in ["--port", "0", "--tls-port"] {
                    push(&a);
                }
                push(&port.to_string());
                push(&"--tls-cert-file");
                push(&ca.file("server.pem"));
                push(&"--tls-key-file");
                push(&ca.file("server.key"));
                push(&"--tls-ca-cert-file");
                push(&ca.ca());
                push(&"--tls-auth-clients");
                push(&"no");
            }
        }
        for a in ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"] {
            push(&a);
        }
        for a in ["--daemonize", "no", "--dir"] {
            push(&a);
        }
        push(&dir.path());
        for a in extra {
            push(a);
        }
        let mut server = Self {
            child: Self::spawn(&args),
            port,
            tls_ca: tls.map(TestCa::ca),
            args,
            _dir: dir,
        };
        server.wait_ready().then_some(server)
    }

    fn spawn(args: &[std::ffi::OsString]) -> Child {
        let spawned = Command::new("redis-server")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        match spawned {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
                "redis-server is not installed: the Redis backend's tests need Debian's \
                 redis-server (apt-get install redis-server; scripts/test.sh installs it)"
            ),
            Err(e) => panic!("cannot start redis-server: {e}"),
        }
    }

    /// Wait for the spawned server to answer `PING`; false if it exited (the port was taken
    /// meanwhile) or never answered within [`START_WAIT`].
    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + START_WAIT;
        while Instant::now() < deadline {
            if self.child.try_wait().ok().flatten().is_some() {
                return false;
            }
            if self.ping() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Kill the server (SIGKILL: nothing flushed, connections reset), as a crash would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Start it again on the same port with the same arguments (empty: no persistence).
    pub fn restart(&mut self) {
        self.kill();
        for _ in 0..50 {
            self.child = Self::spawn(&self.args);
            if self.wait_ready() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("redis-server did not start again on port {}", self.port);
    }

    fn ping(&self) -> bool {
        if self.tls_ca.is_some() {
            return self
                .try_raw()
                .and_then(|mut c| ::redis::cmd("PING").query::<String>(&mut c))
                .is_ok_and(|pong| pong == "PONG");
        }
        let Ok(mut s) = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        if s.write_all(b"PING\r\n").is_err() {
            return false;
        }
        let mut buf = [0u8; 7];
        s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
    }

    /// `redis://127.0.0.1:PORT/DB` (`rediss://` when serving TLS).
    pub fn url(&self, db: u8) -> RedisUrl {
        let scheme = if self.tls_ca.is_some() {
            "rediss"
        } else {
            "redis"
        };
        RedisUrl::parse(&format!("{scheme}://127.0.0.1:{}/{db}", self.port)).unwrap()
    }

    /// The loopback port it listens on (TLS only, when serving TLS).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A plain (synchronous) client connection, for a test to look at or tamper with the
    /// stored keys.
    pub fn raw(&self) -> ::redis::Connection {
        self.try_raw().unwrap()
    }

    fn try_raw(&self) -> ::redis::RedisResult<::redis::Connection> {
        let url = self.url(0);
        let client = match &self.tls_ca {
            Some(ca) => super::tls::client_with_ca(url.expose(), std::fs::read(ca)?)?,
            None => ::redis::Client::open(url.expose())?,
        };
        client.get_connection_with_timeout(Duration::from_secs(2))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
