//! Verification against AWS's published vectors and against requests the proxy's own signer
//! made for the proxy's host (a client holding the proxy's key signs exactly so).

use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderValue, Method, Uri};

use super::*;
use crate::sigv4::{sign_at, Outgoing};

/// 2015-08-30T12:36:00Z, the AWS SigV4 test suite's time.
fn suite_time() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_440_938_160)
}

fn suite_credentials() -> Credentials {
    Credentials::new(
        "AKIDEXAMPLE",
        "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        None,
        None,
        "test",
    )
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            http::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

/// The suite's `get-vanilla` request as sent (GET `/`, `host` and `x-amz-date` signed), with
/// its published signature
/// (https://github.com/awslabs/aws-c-auth/tree/main/tests/aws-signing-test-suite/v4/get-vanilla).
fn get_vanilla() -> HeaderMap {
    headers(&[
        ("host", "example.amazonaws.com"),
        ("x-amz-date", "20150830T123600Z"),
        ("authorization", "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
    ])
}

fn root() -> Uri {
    Uri::from_static("/")
}

#[test]
fn the_suite_s_signature_verifies_with_its_key() {
    let at = suite_time() + Duration::from_secs(60);
    let h = get_vanilla();
    assert_eq!(
        verify_at(&suite_credentials(), &Method::GET, &root(), &h, b"", at),
        Ok(())
    );
    // Anything the signature covers, changed: the method, the path, a query, the host, the
    // body, the date (within the skew).
    let creds = suite_credentials();
    let check = |m: &Method, uri: &str, h: &HeaderMap, body: &[u8]| {
        verify_at(&creds, m, &uri.parse().unwrap(), h, body, at)
    };
    assert_eq!(
        check(&Method::POST, "/", &h, b""),
        Err(Unverified::Mismatch)
    );
    assert_eq!(
        check(&Method::GET, "/x", &h, b""),
        Err(Unverified::Mismatch)
    );
    assert_eq!(
        check(&Method::GET, "/?a=b", &h, b""),
        Err(Unverified::Mismatch)
    );
    assert_eq!(
        check(&Method::GET, "/", &h, b"{}"),
        Err(Unverified::Mismatch)
    );
    let mut other_host = h.clone();
    other_host.insert(
        "host",
        HeaderValue::from_static("example.amazonaws.com:8787"),
    );
    assert_eq!(
        check(&Method::GET, "/", &other_host, b""),
        Err(Unverified::Mismatch)
    );
    let mut other_date = h.clone();
    other_date.insert("x-amz-date", HeaderValue::from_static("20150830T123601Z"));
    assert_eq!(
        check(&Method::GET, "/", &other_date, b""),
        Err(Unverified::Mismatch)
    );
    // A header the client did not sign may change on the way.
    let mut extra = h.clone();
    extra.insert("user-agent", HeaderValue::from_static("curl/8"));
    assert_eq!(check(&Method::GET, "/", &extra, b""), Ok(()));
}

#[test]
fn wrong_key_stale_date_and_missing_parts_are_named() {
    let at = suite_time();
    let h = get_vanilla();
    let other = Credentials::new(
        "AKIDOTHER",
        "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        None,
        None,
        "t",
    );
    assert_eq!(
        verify_at(&other, &Method::GET, &root(), &h, b"", at),
        Err(Unverified::OtherCredentials)
    );
    // Same key id, another secret: the signature does not match.
    let forged = Credentials::new("AKIDEXAMPLE", "not-the-secret", None, None, "t");
    assert_eq!(
        verify_at(&forged, &Method::GET, &root(), &h, b"", at),
        Err(Unverified::Mismatch)
    );
    let creds = suite_credentials();
    for (delta, late) in [(301_i64, true), (-301, true), (300, false), (-300, false)] {
        let now = if delta >= 0 {
            at + Duration::from_secs(delta.unsigned_abs())
        } else {
            at - Duration::from_secs(delta.unsigned_abs())
        };
        let got = verify_at(&creds, &Method::GET, &root(), &h, b"", now);
        if late {
            assert_eq!(got, Err(Unverified::Skewed(301)), "{delta}");
        } else {
            assert_eq!(got, Ok(()), "{delta}");
        }
    }
    let mut no_date = h.clone();
    no_date.remove("x-amz-date");
    assert_eq!(
        verify_at(&creds, &Method::GET, &root(), &no_date, b"", at),
        Err(Unverified::NoDate)
    );
    let mut no_host = h.clone();
    no_host.remove("host");
    assert_eq!(
        verify_at(&creds, &Method::GET, &root(), &no_host, b"", at),
        Err(Unverified::MissingHeader("host".into()))
    );
    for auth in [
        None,
        Some("Bearer ABSKQmVkcm9ja0FQSUtleQ=="),
        Some("AWS4-HMAC-SHA256 junk"),
    ] {
        let mut x = h.clone();
        x.remove("authorization");
        if let Some(a) = auth {
            x.insert("authorization", HeaderValue::from_static(a));
        }
        assert_eq!(
            verify_at(&creds, &Method::GET, &root(), &x, b"", at),
            Err(Unverified::NotSigV4)
        );
    }
}

/// A request signed for the proxy's host with the proxy's key (what boto3 sends when it
/// shares the proxy's credentials): verified, the route's prefix and the model id's
/// percent-encoded `:` included; over HTTP/2 (no `host` header) the URI's authority is the
/// host.
#[test]
fn a_request_signed_with_the_proxy_s_key_for_its_host_verifies() {
    let now = suite_time();
    let creds = Credentials::new(
        "AKIDPROXY",
        "proxySecret/xyz",
        Some("TOKEN".into()),
        None,
        "t",
    );
    let body = br#"{"anthropic_version":"bedrock-2023-05-31","max_tokens":16,"messages":[]}"#;
    let path = "/bedrock/model/us.anthropic.claude-sonnet-4-20250514-v1%3A0/invoke";
    let mut h = headers(&[
        ("content-type", "application/json"),
        ("accept", "application/json"),
        ("x-amz-security-token", "TOKEN"),
        // A client's Authorization names the scope the signer reads (its value is replaced).
        ("authorization", "AWS4-HMAC-SHA256 Credential=AKIDPROXY/19700101/us-east-1/bedrock/aws4_request, SignedHeaders=accept;content-type;host;x-amz-date;x-amz-security-token, Signature=0000000000000000000000000000000000000000000000000000000000000000"),
    ]);
    let uri: Uri = format!("http://127.0.0.1:8787{path}").parse().unwrap();
    sign_at(
        &creds,
        crate::sigv4::Scope {
            region: None,
            trust_client: true,
        },
        Outgoing {
            method: &Method::POST,
            uri: &uri,
            headers: &mut h,
        },
        body,
        now,
    )
    .unwrap();
    // What the proxy receives: the host the client connected to, the origin-form path.
    h.insert("host", HeaderValue::from_static("127.0.0.1:8787"));
    let received: Uri = path.parse().unwrap();
    assert_eq!(
        verify_at(&creds, &Method::POST, &received, &h, body, now),
        Ok(())
    );
    assert_eq!(
        verify_at(&creds, &Method::POST, &received, &h, &body[1..], now),
        Err(Unverified::Mismatch)
    );
    // HTTP/2: no `host` header, the authority in the URI.
    h.remove("host");
    assert_eq!(
        verify_at(&creds, &Method::POST, &uri, &h, body, now),
        Ok(())
    );
}

/// A signature over `UNSIGNED-PAYLOAD` or a streaming marker covers no body: refused by name,
/// before any signature is computed.
#[test]
fn unsigned_and_streaming_payloads_are_refused() {
    let at = suite_time();
    for marker in [
        "UNSIGNED-PAYLOAD",
        "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
        "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
    ] {
        let mut h = get_vanilla();
        h.insert("x-amz-content-sha256", HeaderValue::from_static(marker));
        assert_eq!(
            verify_at(&suite_credentials(), &Method::GET, &root(), &h, b"", at),
            Err(Unverified::UnsignedPayload),
            "{marker}"
        );
    }
}

#[test]
fn amz_dates() {
    assert_eq!(parse_amz_date("20150830T123600Z"), Some(suite_time()));
    for bad in [
        "",
        "20150830T123600",
        "20150830 123600Z",
        "2015-08-30T12:36:00Z",
        "20151330T123600Z",
        "2015083OT123600Z",
    ] {
        assert_eq!(parse_amz_date(bad), None, "{bad}");
    }
}
