//! The client's SigV4 `Authorization` header, read: who signed, for which day, region and
//! service, and which headers the signature covers.
//!
//! Shape (https://docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html, step 6):
//! `AWS4-HMAC-SHA256 Credential=AKID/20261207/us-east-1/bedrock/aws4_request,
//! SignedHeaders=accept;content-type;host;x-amz-date, Signature=<64 hex>` — boto3 separates the
//! three parts with `", "`, the AWS SDK for Rust with `", "` too, some clients with `","`.
//! No crate parses it (the signing crates only write it), hence this small reader.

use http::HeaderValue;

/// The SigV4 algorithm name that opens the header (SigV4a's `AWS4-ECDSA-P256-SHA256` is not
/// read: it signs for a region set, not one region).
pub const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// The scope's last element, fixed by SigV4.
const TERMINATOR: &str = "aws4_request";

/// A SigV4 `Authorization` header, read. The signature is checked for shape (64 lower-case
/// hex digits) and kept for [`super::AwsSigner::verify`] only: `Debug` leaves it out, so no
/// log can print it.
#[derive(Clone, PartialEq, Eq)]
pub struct SigV4Header {
    /// The access key id the client signed with (`AKIA…` long-term, `ASIA…` temporary);
    /// an identifier, not a secret (AWS shows it in consoles and logs).
    pub access_key_id: String,
    /// The scope's date, `YYYYMMDD` (UTC), as the client wrote it.
    pub date: String,
    /// The scope's region, e.g. `us-east-1`.
    pub region: String,
    /// The scope's service, e.g. `bedrock` (Bedrock's runtime signs as `bedrock`).
    pub service: String,
    /// `SignedHeaders`, lower-case, in the order written (SigV4 sorts them).
    pub signed_headers: Vec<String>,
    /// `Signature`: 64 lower-case hex digits.
    pub(crate) signature: String,
}

impl std::fmt::Debug for SigV4Header {
    /// The key id and the scope; never the signature.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigV4Header")
            .field("access_key_id", &self.access_key_id)
            .field("date", &self.date)
            .field("region", &self.region)
            .field("service", &self.service)
            .field("signed_headers", &self.signed_headers)
            .finish_non_exhaustive()
    }
}

impl SigV4Header {
    /// Whether the client's signature covers `name` (lower-case).
    pub fn signs(&self, name: &str) -> bool {
        self.signed_headers.iter().any(|h| h == name)
    }
}

/// Read a SigV4 `Authorization` value; `None` for anything else — a Bedrock API key
/// (`Bearer …`), another scheme, SigV4a, or a SigV4 header missing or repeating one of
/// `Credential`, `SignedHeaders`, `Signature`, or with a malformed scope.
pub fn parse_authorization(value: &HeaderValue) -> Option<SigV4Header> {
    let text = value.to_str().ok()?.trim();
    let rest = text.strip_prefix(ALGORITHM)?;
    // The algorithm is a whole word: `AWS4-HMAC-SHA256X …` is another scheme.
    if !rest.starts_with([' ', '\t']) {
        return None;
    }
    let (mut credential, mut signed, mut signature) = (None, None, None);
    for part in rest.split(',') {
        let (key, val) = part.trim().split_once('=')?;
        let slot = match key {
            "Credential" => &mut credential,
            "SignedHeaders" => &mut signed,
            "Signature" => &mut signature,
            _ => return None,
        };
        if slot.replace(val.trim()).is_some() {
            return None;
        }
    }
    let signature: &str = signature?;
    let hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
    if signature.len() != 64 || !signature.bytes().all(hex) {
        return None;
    }
    let mut scope = credential?.split('/');
    let mut next = || scope.next().filter(|s| !s.is_empty());
    let (access_key_id, date, region, service, terminator) =
        (next()?, next()?, next()?, next()?, next()?);
    if terminator != TERMINATOR || scope.next().is_some() {
        return None;
    }
    if date.len() != 8 || !date.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let signed_headers: Vec<String> = signed?.split(';').map(str::to_owned).collect();
    let lower_token = |h: &String| {
        !h.is_empty()
            && h.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b))
    };
    if !signed_headers.iter().all(lower_token) {
        return None;
    }
    Some(SigV4Header {
        access_key_id: access_key_id.to_owned(),
        date: date.to_owned(),
        region: region.to_owned(),
        service: service.to_owned(),
        signed_headers,
        signature: signature.to_owned(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// boto3 1.44.18's `bedrock-runtime` `invoke_model` with a session token (captured from a
    /// real client pointed at the proxy, `endpoint_url=http://127.0.0.1:8787/bedrock`).
    const BOTO3: &str = "AWS4-HMAC-SHA256 Credential=AKIDCLIENTEXAMPLE/20261207/us-east-1/bedrock/aws4_request, SignedHeaders=accept;content-type;host;x-amz-date;x-amz-security-token, Signature=46c0ec1b29744dd2fc39882faffb37884e4e3641a55740b3af2ce6d6f3c299b8";

    fn parse(s: &str) -> Option<SigV4Header> {
        parse_authorization(&HeaderValue::from_str(s).unwrap())
    }

    #[test]
    fn boto3_header_is_read() {
        let h = parse(BOTO3).unwrap();
        assert_eq!(
            h,
            SigV4Header {
                access_key_id: "AKIDCLIENTEXAMPLE".into(),
                date: "20261207".into(),
                region: "us-east-1".into(),
                service: "bedrock".into(),
                signed_headers: vec![
                    "accept".into(),
                    "content-type".into(),
                    "host".into(),
                    "x-amz-date".into(),
                    "x-amz-security-token".into()
                ],
                signature: "46c0ec1b29744dd2fc39882faffb37884e4e3641a55740b3af2ce6d6f3c299b8"
                    .into(),
            }
        );
        assert!(h.signs("x-amz-security-token"));
        assert!(!h.signs("user-agent"));
    }

    /// The AWS signing test suite's `get-vanilla` header, and the same with `,` alone between
    /// the parts (some hand-written clients).
    #[test]
    fn aws_test_suite_header_is_read() {
        let h = parse("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31").unwrap();
        assert_eq!(
            (h.access_key_id.as_str(), h.date.as_str()),
            ("AKIDEXAMPLE", "20150830")
        );
        assert_eq!(
            (h.region.as_str(), h.service.as_str()),
            ("us-east-1", "service")
        );
        assert_eq!(h.signed_headers, ["host", "x-amz-date"]);
        let tight = parse("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request,SignedHeaders=host;x-amz-date,Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31").unwrap();
        assert_eq!(tight, h);
    }

    #[test]
    fn anything_else_is_none() {
        let sig = "Signature=46c0ec1b29744dd2fc39882faffb37884e4e3641a55740b3af2ce6d6f3c299b8";
        let cred = "Credential=AKID/20261207/us-east-1/bedrock/aws4_request";
        let sh = "SignedHeaders=host;x-amz-date";
        for bad in [
            // A Bedrock API key, other schemes.
            "Bearer ABSKQmVkcm9ja0FQSUtleS1leGFtcGxl".to_owned(),
            "Basic dXNlcjpwYXNz".to_owned(),
            "AWS AKIDEXAMPLE:frJIUN8DYpKDtOLCwo//yllqDzg=".to_owned(),
            // SigV4a, and a glued algorithm name.
            format!("AWS4-ECDSA-P256-SHA256 {cred}, {sh}, {sig}"),
            format!("AWS4-HMAC-SHA256X {cred}, {sh}, {sig}"),
            // A part missing, repeated or unknown.
            format!("AWS4-HMAC-SHA256 {cred}, {sh}"),
            format!("AWS4-HMAC-SHA256 {cred}, {sig}"),
            format!("AWS4-HMAC-SHA256 {sh}, {sig}"),
            format!("AWS4-HMAC-SHA256 {cred}, {cred}, {sh}, {sig}"),
            format!("AWS4-HMAC-SHA256 {cred}, {sh}, {sig}, Extra=1"),
            // A malformed scope.
            format!("AWS4-HMAC-SHA256 Credential=AKID/20261207/us-east-1/bedrock, {sh}, {sig}"),
            format!("AWS4-HMAC-SHA256 Credential=AKID/20261207/us-east-1/bedrock/aws4_request/x, {sh}, {sig}"),
            format!("AWS4-HMAC-SHA256 Credential=AKID/2026-12-07/us-east-1/bedrock/aws4_request, {sh}, {sig}"),
            format!("AWS4-HMAC-SHA256 Credential=AKID//us-east-1/bedrock/aws4_request, {sh}, {sig}"),
            format!("AWS4-HMAC-SHA256 Credential=AKID/20261207/us-east-1/bedrock/aws5_request, {sh}, {sig}"),
            // Signed headers not lower-case tokens; a short or upper-case signature.
            format!("AWS4-HMAC-SHA256 {cred}, SignedHeaders=Host;x-amz-date, {sig}"),
            format!("AWS4-HMAC-SHA256 {cred}, SignedHeaders=host;;x-amz-date, {sig}"),
            format!("AWS4-HMAC-SHA256 {cred}, {sh}, Signature=46c0ec1b"),
            format!("AWS4-HMAC-SHA256 {cred}, {sh}, Signature=46C0EC1B29744DD2FC39882FAFFB37884E4E3641A55740B3AF2CE6D6F3C299B8"),
            String::new(),
        ] {
            assert_eq!(parse(&bad), None, "{bad}");
        }
        // Bytes that are not text.
        let raw = HeaderValue::from_bytes(b"AWS4-HMAC-SHA256 \xff").unwrap();
        assert_eq!(parse_authorization(&raw), None);
    }

    /// Debug names the key id and the scope, never the signature.
    #[test]
    fn debug_never_prints_the_signature() {
        let shown = format!("{:?}", parse(BOTO3).unwrap());
        assert!(shown.contains("AKIDCLIENTEXAMPLE"), "{shown}");
        assert!(!shown.contains("46c0ec1b"), "{shown}");
    }
}
