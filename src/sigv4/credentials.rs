//! The proxy's own AWS credentials for one route: where they come from (the standard chain,
//! `aws-config`'s providers) and the copy a request signs with (kept in memory, read without
//! I/O).
//!
//! Sources, first that answers wins (https://docs.aws.amazon.com/sdkref/latest/guide/standardized-credentials.html):
//! - `[routes.aws] profile = "name"`: that profile of the shared files only;
//! - otherwise the environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, optional
//!   `AWS_SESSION_TOKEN`), then the shared files' `AWS_PROFILE` profile (`default` when unset).
//!
//! The shared files are `~/.aws/credentials` and `~/.aws/config`, or the files
//! `AWS_SHARED_CREDENTIALS_FILE` and `AWS_CONFIG_FILE` name
//! (https://docs.aws.amazon.com/sdkref/latest/guide/file-location.html).
//!
//! Caching: `aws-config` reads a file with blocking `std::fs::read` inside its async provider
//! (aws-types `os_shim_internal::Fs::read_to_end`), and its profile provider parses the files
//! once per provider (a `OnceCell` in its `ProviderConfig`) and keeps the provider chain it
//! built (another `OnceCell`); credentials themselves are cached only by an SDK client's
//! identity cache, which the proxy has none of. So [`RouteCredentials::load`] runs the
//! provider once, at startup, and keeps the answer; a request reads that copy
//! ([`RouteCredentials::current`]). Credentials that expire are asked for again, through the
//! same provider (its files already parsed: no file is read again), when fewer than
//! [`REFRESH_BEFORE`] remain.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use aws_config::environment::EnvironmentVariableCredentialsProvider;
use aws_config::meta::credentials::CredentialsProviderChain;
use aws_config::profile::ProfileFileCredentialsProvider;
use aws_config::provider_config::ProviderConfig;
use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_credential_types::Credentials;
use aws_smithy_runtime_api::client::http::{
    http_client_fn, HttpConnector, HttpConnectorFuture, SharedHttpClient, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::result::ConnectorError;

use crate::config::AwsConfig;

/// How long before their expiry credentials are asked for again: 5 minutes, the AWS SDKs'
/// default refresh buffer (aws-smithy-runtime `LazyCache`'s `DEFAULT_BUFFER_TIME`).
pub const REFRESH_BEFORE: Duration = Duration::from_secs(300);

/// One route's credentials: the provider they came from and the current copy.
pub struct RouteCredentials {
    provider: SharedCredentialsProvider,
    current: ArcSwap<Credentials>,
}

impl std::fmt::Debug for RouteCredentials {
    /// The access key id and expiry only (`Credentials`' own Debug redacts the secret and
    /// omits the session token; this prints even less).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = self.current.load();
        f.debug_struct("RouteCredentials")
            .field("access_key_id", &c.access_key_id())
            .field("expiry", &c.expiry())
            .finish_non_exhaustive()
    }
}

/// The provider a route's `[routes.aws]` section names: its `profile` alone, else the
/// environment then the `AWS_PROFILE` (or `default`) profile. The providers get
/// [`no_network`] as their HTTP client: a profile that needs a call (STS `AssumeRole`, the
/// instance metadata or container endpoints) fails to load instead of calling out.
pub fn provider_for(aws: Option<&AwsConfig>) -> SharedCredentialsProvider {
    let conf = ProviderConfig::default().with_http_client(no_network());
    let profile = ProfileFileCredentialsProvider::builder().configure(&conf);
    match aws.and_then(|a| a.profile.as_deref()) {
        Some(name) => SharedCredentialsProvider::new(profile.profile_name(name).build()),
        None => SharedCredentialsProvider::new(
            CredentialsProviderChain::first_try(
                "Environment",
                EnvironmentVariableCredentialsProvider::new(),
            )
            .or_else("Profile", profile.build()),
        ),
    }
}

/// An HTTP client that refuses every request. `aws-config` is built without its HTTPS client
/// (no TLS stack of its own, no IMDS / SSO / STS calls from the proxy), and its profile
/// provider wants a client to build its instance-metadata fallback with.
fn no_network() -> SharedHttpClient {
    http_client_fn(|_, _| SharedHttpConnector::new(Refuse))
}

/// [`no_network`]'s connector.
#[derive(Debug)]
struct Refuse;

impl HttpConnector for Refuse {
    fn call(&self, _request: HttpRequest) -> HttpConnectorFuture {
        HttpConnectorFuture::ready(Err(ConnectorError::other(
            "cachekeeper makes no AWS calls for credentials: only static keys (environment, \
             shared files) are read"
                .into(),
            None,
        )))
    }
}

impl RouteCredentials {
    /// Ask `provider` once (at startup: a file may be read, blocking) and keep the answer.
    ///
    /// Errors: the provider's, e.g. `CredentialsNotLoaded` when no source has credentials.
    pub async fn load(provider: SharedCredentialsProvider) -> Result<Self, CredentialsError> {
        let first = provider.provide_credentials().await?;
        Ok(Self {
            provider,
            current: ArcSwap::from_pointee(first),
        })
    }

    /// The credentials to sign with at `now`: the kept copy, or, when it expires within
    /// [`REFRESH_BEFORE`], a fresh one from the provider (kept for the next request). A
    /// failed refresh keeps the old copy, with a warning: the upstream says whether it
    /// still holds.
    pub async fn current(&self, now: SystemTime) -> Arc<Credentials> {
        let kept = self.current.load_full();
        let fresh_enough = kept.expiry().is_none_or(|at| {
            at.duration_since(now)
                .is_ok_and(|left| left > REFRESH_BEFORE)
        });
        if fresh_enough {
            return kept;
        }
        match self.provider.provide_credentials().await {
            Ok(c) => {
                let c = Arc::new(c);
                self.current.store(Arc::clone(&c));
                c
            }
            Err(e) => {
                tracing::warn!(
                    target: "cachekeeper::sigv4",
                    error = %e,
                    "refreshing the proxy's AWS credentials failed; signing with the ones it has"
                );
                kept
            }
        }
    }
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    reason = "tests: #[tokio::test] blocks on its future"
)]
pub(crate) mod tests {
    use super::*;
    use std::sync::Mutex;

    /// The process environment is one for every test thread: tests that set AWS variables
    /// hold this lock, and put back what was there.
    pub(crate) static ENV: Mutex<()> = Mutex::new(());

    /// The AWS variables the chain reads, set to the given values (`None` removes), for the
    /// life of the guard.
    pub(crate) struct EnvGuard {
        saved: Vec<(&'static str, Option<std::ffi::OsString>)>,
        _lock: std::sync::MutexGuard<'static, ()>,
    }

    pub(crate) const VARS: [&str; 6] = [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_CONFIG_FILE",
        "AWS_SHARED_CREDENTIALS_FILE",
    ];

    impl EnvGuard {
        pub(crate) fn set(values: &[(&'static str, Option<&str>)]) -> Self {
            let lock = ENV
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let saved = VARS.iter().map(|k| (*k, std::env::var_os(k))).collect();
            for k in VARS {
                std::env::remove_var(k);
            }
            for (k, v) in values {
                if let Some(v) = v {
                    std::env::set_var(k, v);
                }
            }
            Self { saved, _lock: lock }
        }
    }

    impl Drop for EnvGuard {
        fn drop(&mut self) {
            for (k, v) in &self.saved {
                match v {
                    Some(v) => std::env::set_var(k, v),
                    None => std::env::remove_var(k),
                }
            }
        }
    }

    /// Shared files in a temp folder: a `default` and a `bedrock` profile in the credentials
    /// file, a `cfg-only` profile in the config file; no file of the user's is read.
    fn shared_files() -> (tempfile::TempDir, String, String) {
        let dir = tempfile::tempdir().unwrap();
        let creds = dir.path().join("credentials");
        let config = dir.path().join("config");
        std::fs::write(
            &creds,
            "[default]\naws_access_key_id = AKIDDEFAULTFILE\naws_secret_access_key = defaultFileSecret\n\n\
             [bedrock]\naws_access_key_id = AKIDBEDROCKFILE\naws_secret_access_key = bedrockFileSecret\n\
             aws_session_token = bedrockFileToken\n",
        )
        .unwrap();
        std::fs::write(
            &config,
            "[profile cfg-only]\naws_access_key_id = AKIDCONFIGFILE\naws_secret_access_key = configFileSecret\n",
        )
        .unwrap();
        let s = |p: std::path::PathBuf| p.to_string_lossy().into_owned();
        (dir, s(creds), s(config))
    }

    #[tokio::test]
    async fn credentials_from_the_environment() {
        let (_dir, creds, config) = shared_files();
        let _env = EnvGuard::set(&[
            ("AWS_ACCESS_KEY_ID", Some("AKIDENVEXAMPLE")),
            ("AWS_SECRET_ACCESS_KEY", Some("envSecretEXAMPLE")),
            ("AWS_SESSION_TOKEN", Some("envTokenEXAMPLE")),
            ("AWS_SHARED_CREDENTIALS_FILE", Some(&creds)),
            ("AWS_CONFIG_FILE", Some(&config)),
        ]);
        let c = RouteCredentials::load(provider_for(None)).await.unwrap();
        let now = c.current(SystemTime::now()).await;
        assert_eq!(now.access_key_id(), "AKIDENVEXAMPLE");
        assert_eq!(now.secret_access_key(), "envSecretEXAMPLE");
        assert_eq!(now.session_token(), Some("envTokenEXAMPLE"));
        // The environment wins over the `default` profile without a route profile; a route
        // profile is read from the files alone.
        let named = Some(AwsConfig {
            profile: Some("bedrock".into()),
            region: None,
            sign_all: false,
        });
        let c = RouteCredentials::load(provider_for(named.as_ref()))
            .await
            .unwrap();
        assert_eq!(
            c.current(SystemTime::now()).await.access_key_id(),
            "AKIDBEDROCKFILE"
        );
    }

    #[tokio::test]
    async fn credentials_from_a_named_profile_in_temp_shared_files() {
        let (_dir, creds, config) = shared_files();
        let _env = EnvGuard::set(&[
            ("AWS_SHARED_CREDENTIALS_FILE", Some(&creds)),
            ("AWS_CONFIG_FILE", Some(&config)),
        ]);
        let route = |p: &str| {
            Some(AwsConfig {
                profile: Some(p.into()),
                region: None,
                sign_all: false,
            })
        };
        let c = RouteCredentials::load(provider_for(route("bedrock").as_ref()))
            .await
            .unwrap();
        let now = c.current(SystemTime::now()).await;
        assert_eq!(now.access_key_id(), "AKIDBEDROCKFILE");
        assert_eq!(now.secret_access_key(), "bedrockFileSecret");
        assert_eq!(now.session_token(), Some("bedrockFileToken"));
        let c = RouteCredentials::load(provider_for(route("cfg-only").as_ref()))
            .await
            .unwrap();
        assert_eq!(
            c.current(SystemTime::now()).await.access_key_id(),
            "AKIDCONFIGFILE"
        );
        // No route profile, no environment: `default`, or `AWS_PROFILE`'s.
        let c = RouteCredentials::load(provider_for(None)).await.unwrap();
        assert_eq!(
            c.current(SystemTime::now()).await.access_key_id(),
            "AKIDDEFAULTFILE"
        );
        drop(_env);
        let _env = EnvGuard::set(&[
            ("AWS_SHARED_CREDENTIALS_FILE", Some(&creds)),
            ("AWS_CONFIG_FILE", Some(&config)),
            ("AWS_PROFILE", Some("bedrock")),
        ]);
        let c = RouteCredentials::load(provider_for(None)).await.unwrap();
        assert_eq!(
            c.current(SystemTime::now()).await.access_key_id(),
            "AKIDBEDROCKFILE"
        );
        // A profile the files lack: an error, not someone else's credentials.
        assert!(
            RouteCredentials::load(provider_for(route("missing").as_ref()))
                .await
                .is_err()
        );
    }

    /// Profiles that need more than the files (an STS call, SSO, a process) fail to load:
    /// the build has no HTTP client, no SSO and no `credential_process`.
    #[tokio::test]
    async fn profiles_beyond_static_keys_fail_to_load() {
        let (dir, creds, _) = shared_files();
        let config = dir.path().join("config-more");
        std::fs::write(
            &config,
            "[profile role]\nrole_arn = arn:aws:iam::123456789012:role/bedrock\nsource_profile = default\n\n\
             [profile proc]\ncredential_process = /bin/true\n\n\
             [profile sso]\nsso_start_url = https://example.awsapps.com/start\nsso_region = us-east-1\n\
             sso_account_id = 123456789012\nsso_role_name = Bedrock\n",
        )
        .unwrap();
        let config = config.to_string_lossy().into_owned();
        let _env = EnvGuard::set(&[
            ("AWS_SHARED_CREDENTIALS_FILE", Some(&creds)),
            ("AWS_CONFIG_FILE", Some(&config)),
        ]);
        for p in ["role", "proc", "sso"] {
            let aws = AwsConfig {
                profile: Some(p.into()),
                region: None,
                sign_all: false,
            };
            let got = tokio::time::timeout(
                Duration::from_secs(10),
                RouteCredentials::load(provider_for(Some(&aws))),
            )
            .await
            .expect("no network wait");
            assert!(got.is_err(), "{p}: {got:?}");
        }
    }

    #[tokio::test]
    async fn no_source_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let none = dir.path().join("none").to_string_lossy().into_owned();
        let _env = EnvGuard::set(&[
            ("AWS_SHARED_CREDENTIALS_FILE", Some(&none)),
            ("AWS_CONFIG_FILE", Some(&none)),
        ]);
        let err = RouteCredentials::load(provider_for(None))
            .await
            .unwrap_err();
        assert!(
            matches!(err, CredentialsError::CredentialsNotLoaded(_)),
            "{err:?}"
        );
    }

    /// Credentials near their expiry are asked for again; static ones never are.
    #[tokio::test]
    async fn expiring_credentials_are_refreshed() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = Arc::clone(&calls);
        let provider = SharedCredentialsProvider::new(Counting { calls: counted, t0 });
        let c = RouteCredentials::load(provider).await.unwrap();
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
        // An hour left: the kept copy.
        assert_eq!(c.current(t0).await.access_key_id(), "AKID1");
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
        // Four minutes left: asked again, and the new copy kept.
        let late = t0 + Duration::from_secs(3600 - 240);
        assert_eq!(c.current(late).await.access_key_id(), "AKID2");
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
        assert_eq!(c.current(t0).await.access_key_id(), "AKID2");
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    /// A provider that counts its calls; call n gives `AKID<n>`, expiring an hour after `t0`
    /// (the first) or two hours after (later ones).
    #[derive(Debug)]
    struct Counting {
        calls: Arc<std::sync::atomic::AtomicUsize>,
        t0: SystemTime,
    }

    impl ProvideCredentials for Counting {
        fn provide_credentials<'a>(
            &'a self,
        ) -> aws_credential_types::provider::future::ProvideCredentials<'a>
        where
            Self: 'a,
        {
            let n = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            let hours = if n == 1 { 1 } else { 2 };
            aws_credential_types::provider::future::ProvideCredentials::ready(Ok(Credentials::new(
                format!("AKID{n}"),
                "secret",
                None,
                Some(self.t0 + Duration::from_secs(3600 * hours)),
                "counting",
            )))
        }
    }
}
