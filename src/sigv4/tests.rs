//! Re-signing against published vectors and an independent signer.
//!
//! - AWS's SigV4 test suite (`get-vanilla`, `get-vanilla-with-session-token`,
//!   `post-x-www-form-urlencoded` as published in
//!   https://github.com/awslabs/aws-c-auth/tree/main/tests/aws-signing-test-suite/v4 and the
//!   2015 suite that `create-signed-request.html` links): credentials `AKIDEXAMPLE`, region
//!   `us-east-1`, service `service`, at 2015-08-30T12:36:00Z.
//! - A request as boto3 1.44.18 sends it to the proxy (`invoke_model`, captured from the real
//!   client), re-signed for `bedrock-runtime.us-east-1.amazonaws.com`; the expected values
//!   were computed with botocore 1.44.18's own `SigV4Auth` over the same request (host B, the
//!   rewritten body, the proxy's key), so the result verifies as Bedrock checks it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::disallowed_methods,
    reason = "tests: #[tokio::test] blocks on its future"
)]

use std::time::{Duration, SystemTime};

use http::request::Parts;
use http::{HeaderMap, Method, Request};

use super::*;

/// [`sign_at`] over a request's parts.
fn resign_at(
    creds: &Credentials,
    region: Option<&str>,
    p: &mut Parts,
    body: &[u8],
    time: SystemTime,
) -> Result<(), SignError> {
    let out = Outgoing {
        method: &p.method,
        uri: &p.uri,
        headers: &mut p.headers,
    };
    let scope = Scope {
        region,
        trust_client: true,
    };
    sign_at(creds, scope, out, body, time)
}

/// The outgoing request of a request's parts.
fn outgoing(p: &mut Parts) -> Outgoing<'_> {
    Outgoing {
        method: &p.method,
        uri: &p.uri,
        headers: &mut p.headers,
    }
}

/// 2015-08-30T12:36:00Z, the test suite's time.
fn suite_time() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_440_938_160)
}

/// 2026-12-07T08:00:00Z, the boto3 capture's (frozen) time.
fn capture_time() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_630_400)
}

fn suite_credentials(token: Option<&str>) -> Credentials {
    Credentials::new(
        "AKIDEXAMPLE",
        "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        token.map(str::to_owned),
        None,
        "test",
    )
}

fn proxy_credentials(token: Option<&str>) -> Credentials {
    Credentials::new(
        "AKIDPROXYEXAMPLE",
        "proxySecretKeyEXAMPLE/xyz+uvw",
        token.map(str::to_owned),
        None,
        "test",
    )
}

fn parts(method: Method, uri: &str, headers: &[(&str, &str)]) -> Parts {
    let mut req = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.body(()).unwrap().into_parts().0
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).map(|v| v.to_str().unwrap())
}

/// A client's signature for the suite's scope, for a host the proxy listens on (its value is
/// replaced; only its scope and signed-header list are read).
const SUITE_CLIENT: &str = "AWS4-HMAC-SHA256 Credential=AKIDCLIENT/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=0000000000000000000000000000000000000000000000000000000000000000";

#[test]
fn aws_suite_get_vanilla() {
    let mut p = parts(
        Method::GET,
        "https://example.amazonaws.com/",
        &[
            ("host", "127.0.0.1:8787"),
            ("x-amz-date", "20150830T000000Z"),
            ("authorization", SUITE_CLIENT),
        ],
    );
    resign_at(&suite_credentials(None), None, &mut p, b"", suite_time()).unwrap();
    assert_eq!(
        header(&p.headers, "authorization"),
        Some("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31")
    );
    assert_eq!(header(&p.headers, "x-amz-date"), Some("20150830T123600Z"));
    // The proxy's host header is gone: the HTTP client writes the upstream's.
    assert_eq!(header(&p.headers, "host"), None);
    assert_eq!(header(&p.headers, "x-amz-security-token"), None);
    assert_eq!(header(&p.headers, "x-amz-content-sha256"), None);
}

#[test]
fn aws_suite_get_vanilla_with_session_token() {
    let token = "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267";
    let mut p = parts(
        Method::GET,
        "https://example.amazonaws.com/",
        &[("authorization", SUITE_CLIENT)],
    );
    resign_at(
        &suite_credentials(Some(token)),
        None,
        &mut p,
        b"",
        suite_time(),
    )
    .unwrap();
    assert_eq!(
        header(&p.headers, "authorization"),
        Some("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date;x-amz-security-token, Signature=07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8")
    );
    assert_eq!(header(&p.headers, "x-amz-security-token"), Some(token));
}

/// The 2015 suite's `post-x-www-form-urlencoded` (SignedHeaders `content-type;host;x-amz-date`).
#[test]
fn aws_suite_post_x_www_form_urlencoded() {
    let mut p = parts(
        Method::POST,
        "https://example.amazonaws.com/",
        &[
            ("content-type", "application/x-www-form-urlencoded"),
            ("content-length", "13"),
            ("authorization", SUITE_CLIENT),
        ],
    );
    resign_at(
        &suite_credentials(None),
        None,
        &mut p,
        b"Param1=value1",
        suite_time(),
    )
    .unwrap();
    assert_eq!(
        header(&p.headers, "authorization"),
        Some("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature=ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a")
    );
}

/// boto3's `invoke_model` to the proxy, as sent (headers in boto3's order and case).
fn boto3_request(upstream: &str) -> Parts {
    parts(
        Method::POST,
        upstream,
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json"),
            ("User-Agent", "Boto3/1.44.18 md/Botocore#1.44.18 ua/2.1 os/linux#6.18.44-fc-v1300 md/arch#x86_64 lang/python#3.11.7 md/pyimpl#CPython m/N,e,b,Z,E cfg/retry-mode#standard Botocore/1.44.18"),
            ("X-Amz-Date", "20261207T080000Z"),
            ("X-Amz-Security-Token", "ClientSessionTokenEXAMPLE"),
            ("Authorization", "AWS4-HMAC-SHA256 Credential=AKIDCLIENTEXAMPLE/20261207/us-east-1/bedrock/aws4_request, SignedHeaders=accept;content-type;host;x-amz-date;x-amz-security-token, Signature=46c0ec1b29744dd2fc39882faffb37884e4e3641a55740b3af2ce6d6f3c299b8"),
            ("amz-sdk-invocation-id", "d8fe68f4-8054-4bac-a31a-08f596c4ee24"),
            ("amz-sdk-request", "attempt=1; max=3"),
            ("Content-Length", "110"),
        ],
    )
}

/// The upstream URI of the proxy's Bedrock route for boto3's path
/// (`/bedrock` + `/model/…/invoke`, the model id's `:` percent-encoded as boto3 sends it).
const UPSTREAM: &str = "https://bedrock-runtime.us-east-1.amazonaws.com/model/us.anthropic.claude-sonnet-4-20250514-v1%3A0/invoke";

/// The body after a rewrite (a `cache_control` marker added): what is sent, and signed.
const REWRITTEN: &[u8] = br#"{"anthropic_version": "bedrock-2023-05-31", "max_tokens": 16, "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}]}"#;

/// botocore's `SigV4Auth` over (POST, `UPSTREAM`, content-type, `REWRITTEN`) with the proxy's
/// key and token, at the capture's time.
const BOTOCORE_RESIGNED: &str = "AWS4-HMAC-SHA256 Credential=AKIDPROXYEXAMPLE/20261207/us-east-1/bedrock/aws4_request, SignedHeaders=content-type;host;x-amz-date;x-amz-security-token, Signature=4a05481ec3a66dd8cc6e9a48a8f8a80f1c4b6878093b84667223c65c7cc23d44";

/// A request boto3 signed with the client's key for the proxy's host is re-signed with the
/// proxy's key for Bedrock's host and the rewritten body; the result is botocore's own
/// signature of that request, and re-signing again (the one retry) gives it again.
#[test]
fn boto3_request_is_resigned_for_the_upstream() {
    let creds = proxy_credentials(Some("ProxySessionTokenEXAMPLE"));
    let mut p = boto3_request(UPSTREAM);
    resign_at(&creds, None, &mut p, REWRITTEN, capture_time()).unwrap();
    assert_eq!(header(&p.headers, "authorization"), Some(BOTOCORE_RESIGNED));
    assert_eq!(header(&p.headers, "x-amz-date"), Some("20261207T080000Z"));
    assert_eq!(
        header(&p.headers, "x-amz-security-token"),
        Some("ProxySessionTokenEXAMPLE")
    );
    // Nothing else is touched; no checksum header the client did not send.
    assert_eq!(header(&p.headers, "x-amz-content-sha256"), None);
    assert_eq!(header(&p.headers, "accept"), Some("application/json"));
    assert_eq!(header(&p.headers, "content-length"), Some("110"));
    assert_eq!(
        header(&p.headers, "amz-sdk-request"),
        Some("attempt=1; max=3")
    );
    assert!(header(&p.headers, "user-agent")
        .unwrap()
        .starts_with("Boto3/1.44.18"));
    assert_eq!(p.headers.len(), 9);
    // The signature headers are marked sensitive (hyper's HPACK never indexes them).
    assert!(p.headers.get("authorization").unwrap().is_sensitive());
    // The retry re-signs the already re-signed request: the same value at the same time.
    resign_at(&creds, None, &mut p, REWRITTEN, capture_time()).unwrap();
    assert_eq!(header(&p.headers, "authorization"), Some(BOTOCORE_RESIGNED));
    assert_eq!(p.headers.len(), 9);
}

/// The route's region wins over the client's scope; credentials without a token remove the
/// client's token; a client's `x-amz-content-sha256` is recomputed over the sent body.
#[test]
fn region_token_and_payload_hash() {
    let west = UPSTREAM.replace("us-east-1", "us-west-2");
    let mut p = boto3_request(&west);
    resign_at(
        &proxy_credentials(None),
        Some("us-west-2"),
        &mut p,
        REWRITTEN,
        capture_time(),
    )
    .unwrap();
    assert_eq!(
        header(&p.headers, "authorization"),
        Some("AWS4-HMAC-SHA256 Credential=AKIDPROXYEXAMPLE/20261207/us-west-2/bedrock/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature=a6c846d4fc93a1d2b95671fd57daeda4705dc3cfd03719505eb4b251ce38dcbc")
    );
    assert_eq!(header(&p.headers, "x-amz-security-token"), None);

    let mut p = boto3_request(UPSTREAM);
    p.headers.insert(
        "x-amz-content-sha256",
        HeaderValue::from_static("stale-client-hash"),
    );
    resign_at(
        &proxy_credentials(None),
        None,
        &mut p,
        REWRITTEN,
        capture_time(),
    )
    .unwrap();
    assert_eq!(
        header(&p.headers, "x-amz-content-sha256"),
        Some("3a27ef06b463a2f579da31441f3ae28c8bffd28a89f451e2a691b9b2347e8c2b")
    );
    assert_eq!(
        header(&p.headers, "authorization"),
        Some("AWS4-HMAC-SHA256 Credential=AKIDPROXYEXAMPLE/20261207/us-east-1/bedrock/aws4_request, SignedHeaders=content-type;host;x-amz-content-sha256;x-amz-date, Signature=bcfce00e32a6d5b30b2aa9d76baa0a42eb597f1bfe8b0db2e5eda1e6bc2ef627")
    );
}

/// Signed: `x-amz-*` headers the client signed. Not signed: those it did not sign, the
/// client's other signed headers (`accept`), and a header `connection` names (the outgoing
/// headers have been through the hop-by-hop hygiene, as on the request path).
#[test]
fn which_headers_are_signed() {
    let client = "AWS4-HMAC-SHA256 Credential=AKIDCLIENT/20261207/us-east-1/bedrock/aws4_request, SignedHeaders=accept;content-type;host;x-amz-date;x-amz-meta-a;x-amz-meta-hop;x-amz-user-agent, Signature=46c0ec1b29744dd2fc39882faffb37884e4e3641a55740b3af2ce6d6f3c299b8";
    let mut p = parts(
        Method::POST,
        UPSTREAM,
        &[
            ("authorization", client),
            ("accept", "application/json"),
            ("content-type", "application/json"),
            ("x-amz-meta-a", "1"),
            ("x-amz-meta-hop", "2"),
            ("x-amz-meta-unsigned", "3"),
            ("connection", "x-amz-meta-hop"),
            ("transfer-encoding", "chunked"),
        ],
    );
    crate::wire::upstream::upstream_request_headers(&mut p.headers, false);
    resign_at(
        &proxy_credentials(None),
        None,
        &mut p,
        b"{}",
        capture_time(),
    )
    .unwrap();
    let auth = header(&p.headers, "authorization").unwrap();
    let signed = auth.split("SignedHeaders=").nth(1).unwrap();
    let signed = signed.split(',').next().unwrap();
    assert_eq!(signed, "content-type;host;x-amz-date;x-amz-meta-a");
}

#[test]
fn refusals_leave_the_request_as_it_was() {
    let bearer = parts(
        Method::POST,
        UPSTREAM,
        &[("authorization", "Bearer ABSKQmVkcm9ja0FQSUtleQ==")],
    );
    let mut p = bearer.clone();
    let err = resign_at(
        &proxy_credentials(None),
        None,
        &mut p,
        b"{}",
        capture_time(),
    )
    .unwrap_err();
    assert!(matches!(err, SignError::NotSigV4), "{err:?}");
    assert_eq!(p.headers, bearer.headers);
    // An unsigned request to a host that names no region, with no route region.
    let unsigned = parts(Method::POST, "http://127.0.0.1:9/model/x/invoke", &[]);
    let mut p = unsigned.clone();
    let err = resign_at(
        &proxy_credentials(None),
        None,
        &mut p,
        b"{}",
        capture_time(),
    )
    .unwrap_err();
    assert!(
        matches!(err, SignError::NoRegion(ref h) if h == "127.0.0.1"),
        "{err:?}"
    );
    assert_eq!(p.headers, unsigned.headers);
    let relative = boto3_request("/model/x/invoke");
    let mut p = relative.clone();
    let err = resign_at(
        &proxy_credentials(None),
        None,
        &mut p,
        b"{}",
        capture_time(),
    )
    .unwrap_err();
    assert!(matches!(err, SignError::NoUpstreamHost(_)), "{err:?}");
    assert_eq!(p.headers, relative.headers);
}

/// The signer through its public face: a provider's credentials, the region from
/// `[routes.aws]`, the current time (so only the shape is known).
#[tokio::test]
async fn signer_resigns_with_its_provider() {
    let provider = aws_credential_types::provider::SharedCredentialsProvider::new(
        proxy_credentials(Some("ProxySessionTokenEXAMPLE")),
    );
    let aws = AwsConfig {
        profile: None,
        region: Some("eu-central-1".into()),
        sign_all: false,
    };
    let signer = AwsSigner::with_provider(Some(&aws), provider)
        .await
        .unwrap();
    let mut p = boto3_request(UPSTREAM);
    signer.resign(outgoing(&mut p), REWRITTEN, true).unwrap();
    let auth = header(&p.headers, "authorization").unwrap();
    let scope = auth.split(", ").next().unwrap();
    let date = header(&p.headers, "x-amz-date").unwrap();
    assert_eq!(
        scope,
        format!(
            "AWS4-HMAC-SHA256 Credential=AKIDPROXYEXAMPLE/{}/eu-central-1/bedrock/aws4_request",
            &date[..8]
        )
    );
    let read = parse_authorization(p.headers.get("authorization").unwrap()).unwrap();
    assert_eq!(
        read.signed_headers,
        ["content-type", "host", "x-amz-date", "x-amz-security-token"]
    );
}

/// Debug and Display of the signer, its credentials and its errors never print the secret
/// key, the session token or a signature.
#[tokio::test]
async fn secrets_are_never_printed() {
    let provider = aws_credential_types::provider::SharedCredentialsProvider::new(
        proxy_credentials(Some("ProxySessionTokenEXAMPLE")),
    );
    let signer = AwsSigner::with_provider(None, provider).await.unwrap();
    let mut p = boto3_request(UPSTREAM);
    signer.resign(outgoing(&mut p), REWRITTEN, true).unwrap();
    let signature = header(&p.headers, "authorization")
        .unwrap()
        .rsplit("Signature=")
        .next()
        .unwrap()
        .to_owned();
    let mut shown = vec![
        format!("{signer:?}"),
        format!("{:?}", p.headers),
        format!(
            "{:?}",
            parse_authorization(p.headers.get("authorization").unwrap())
        ),
    ];
    let mut relative = boto3_request("/x");
    for err in [
        resign_at(
            &proxy_credentials(None),
            None,
            &mut relative,
            b"",
            capture_time(),
        )
        .unwrap_err(),
        SignError::NotSigV4,
    ] {
        shown.push(format!("{err:?}"));
        shown.push(err.to_string());
    }
    assert!(shown[0].contains("AKIDPROXYEXAMPLE"), "{}", shown[0]);
    for s in &shown {
        assert!(!s.contains("proxySecretKeyEXAMPLE"), "{s}");
        assert!(!s.contains("ProxySessionTokenEXAMPLE"), "{s}");
        assert!(!s.contains(&signature), "{s}");
        assert!(!s.contains("46c0ec1b"), "{s}");
    }
}

/// `from_route` loads the route's credentials now; with none anywhere it gives `None` (the
/// route's signed requests then go upstream unchanged, after a warning).
#[tokio::test]
async fn from_route_loads_now_or_gives_none() {
    use crate::sigv4::credentials::tests::EnvGuard;
    let toml = "[[routes]]\nname = \"bedrock\"\nprefix = \"/bedrock\"\n\
                upstream = \"https://bedrock-runtime.us-east-1.amazonaws.com\"\n\
                [routes.aws]\nregion = \"us-east-1\"\n";
    let (config, _) = crate::config::Config::from_toml(toml).unwrap();
    let route = &config.routes[0];
    let dir = tempfile::tempdir().unwrap();
    let none = dir.path().join("none").to_string_lossy().into_owned();
    {
        let _env = EnvGuard::set(&[
            ("AWS_SHARED_CREDENTIALS_FILE", Some(&none)),
            ("AWS_CONFIG_FILE", Some(&none)),
        ]);
        assert!(AwsSigner::from_route(&route.name, route.aws.as_ref())
            .await
            .is_none());
    }
    let _env = EnvGuard::set(&[
        ("AWS_ACCESS_KEY_ID", Some("AKIDENVEXAMPLE")),
        ("AWS_SECRET_ACCESS_KEY", Some("envSecretEXAMPLE")),
        ("AWS_SHARED_CREDENTIALS_FILE", Some(&none)),
        ("AWS_CONFIG_FILE", Some(&none)),
    ]);
    let signer = AwsSigner::from_route(&route.name, route.aws.as_ref())
        .await
        .unwrap();
    let shown = format!("{signer:?}");
    assert!(
        shown.contains("AKIDENVEXAMPLE") && shown.contains("us-east-1"),
        "{shown}"
    );
    assert!(!shown.contains("envSecretEXAMPLE"), "{shown}");
}

/// A request with no `authorization` (Claude Code with `CLAUDE_CODE_SKIP_BEDROCK_AUTH=1`, on
/// a `sign_all` route) is signed for the region its upstream host names, as `bedrock`, over
/// `content-type`; the same request on a host that names none takes the route's region. The
/// expected value is botocore 1.44.18's `SigV4Auth` over the same request.
#[test]
fn unsigned_requests_are_signed_for_the_host_s_region() {
    let mut p = parts(
        Method::POST,
        UPSTREAM,
        &[
            ("content-type", "application/json"),
            ("anthropic-version", "x"),
        ],
    );
    resign_at(
        &proxy_credentials(None),
        None,
        &mut p,
        REWRITTEN,
        capture_time(),
    )
    .unwrap();
    assert_eq!(
        header(&p.headers, "authorization"),
        Some("AWS4-HMAC-SHA256 Credential=AKIDPROXYEXAMPLE/20261207/us-east-1/bedrock/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature=9640b8b95f41c92e2b567545283402984db151e5150731cf46766be4038d042e")
    );
    assert_eq!(header(&p.headers, "anthropic-version"), Some("x"));
    assert_eq!(
        crate::provider::bedrock_region_of_host("bedrock-runtime-fips.us-gov-west-1.amazonaws.com"),
        Some("us-gov-west-1")
    );
    assert_eq!(
        crate::provider::bedrock_region_of_host("bedrock-runtime.amazonaws.com"),
        None
    );
    assert_eq!(
        crate::provider::bedrock_region_of_host("bedrock-runtime.a.b.amazonaws.com"),
        None
    );
    assert_eq!(crate::provider::bedrock_region_of_host("example.com"), None);
    let mut p = parts(Method::POST, "http://127.0.0.1:9/model/x/invoke", &[]);
    resign_at(
        &proxy_credentials(None),
        Some("eu-west-1"),
        &mut p,
        b"{}",
        capture_time(),
    )
    .unwrap();
    assert!(header(&p.headers, "authorization")
        .unwrap()
        .contains("/20261207/eu-west-1/bedrock/aws4_request"));
}
