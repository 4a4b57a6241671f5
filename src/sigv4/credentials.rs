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
//! (aws-types `os_shim_internal::Fs::read_to_end`), and credentials are cached only by an SDK
//! client's identity cache, which the proxy has none of. So [`RouteCredentials::load`] runs
//! the provider once, off the request path (at startup, and on each reload on a blocking
//! thread: `crate::proxy::aws`), and keeps the answer; a request reads that copy
//! ([`RouteCredentials::current`]), with no I/O. Only static keys load (no STS, SSO or
//! `credential_process`: [`provider_for`]), so a copy has no expiry to watch: keys that
//! change (a rotated `~/.aws/credentials`, a new session token) are read again by a reload
//! (`SIGHUP`).

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
use std::sync::Arc;

use crate::config::AwsConfig;

/// One route's credentials, as the provider gave them when the route loaded.
pub struct RouteCredentials {
    current: Arc<Credentials>,
}

impl std::fmt::Debug for RouteCredentials {
    /// The access key id and expiry only (`Credentials`' own Debug redacts the secret and
    /// omits the session token; this prints even less).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.current;
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
pub(crate) fn provider_for(aws: Option<&AwsConfig>) -> SharedCredentialsProvider {
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
    /// Ask `provider` once (off the request path: a file may be read, blocking) and keep the
    /// answer.
    ///
    /// Errors: the provider's, e.g. `CredentialsNotLoaded` when no source has credentials.
    pub(crate) async fn load(
        provider: SharedCredentialsProvider,
    ) -> Result<Self, CredentialsError> {
        let current = Arc::new(provider.provide_credentials().await?);
        Ok(Self { current })
    }

    /// The credentials to sign with: the kept copy (no I/O).
    pub(crate) fn current(&self) -> &Credentials {
        &self.current
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
        let now = c.current();
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
        assert_eq!(c.current().access_key_id(), "AKIDBEDROCKFILE");
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
        let now = c.current();
        assert_eq!(now.access_key_id(), "AKIDBEDROCKFILE");
        assert_eq!(now.secret_access_key(), "bedrockFileSecret");
        assert_eq!(now.session_token(), Some("bedrockFileToken"));
        let c = RouteCredentials::load(provider_for(route("cfg-only").as_ref()))
            .await
            .unwrap();
        assert_eq!(c.current().access_key_id(), "AKIDCONFIGFILE");
        // No route profile, no environment: `default`, or `AWS_PROFILE`'s.
        let c = RouteCredentials::load(provider_for(None)).await.unwrap();
        assert_eq!(c.current().access_key_id(), "AKIDDEFAULTFILE");
        drop(_env);
        let _env = EnvGuard::set(&[
            ("AWS_SHARED_CREDENTIALS_FILE", Some(&creds)),
            ("AWS_CONFIG_FILE", Some(&config)),
            ("AWS_PROFILE", Some("bedrock")),
        ]);
        let c = RouteCredentials::load(provider_for(None)).await.unwrap();
        assert_eq!(c.current().access_key_id(), "AKIDBEDROCKFILE");
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
                std::time::Duration::from_secs(10),
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
}
