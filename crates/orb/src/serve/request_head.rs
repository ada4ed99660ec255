//! Limits on the request head: a URI over [`MAX_URI_BYTES`] is a 414, header fields over
//! [`MAX_HEADER_BYTES`] in all or more than [`MAX_HEADER_FIELDS`] of them a 431, each a problem
//! document like every other refusal, answered before authentication or any handler runs.
//! hyper's own caps ([`super::listener::BACKSTOP_HEAD_BYTES`] and its neighbours) sit far
//! above these, so only a head no client of the API sends meets hyper's bodiless answer.

use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::problem::Problem;

/// The longest request URI (path and query, as sent) the API reads: what nginx and Apache
/// allow by default, and far beyond any route's ids and filters.
pub const MAX_URI_BYTES: usize = 8 * 1024;
/// The most header bytes (names, values and their `: ` and line ends) a request may carry: room
/// for a large OIDC Bearer token several times over.
pub const MAX_HEADER_BYTES: usize = 32 * 1024;
/// The most header fields a request may carry (hyper's own default).
pub const MAX_HEADER_FIELDS: usize = 100;

/// What the limits measure in a request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadSize {
    pub uri_bytes: usize,
    pub header_bytes: usize,
    pub header_fields: usize,
    /// The largest field, `(name, bytes)`, to name in a refusal.
    pub largest_header: Option<(String, usize)>,
}

impl HeadSize {
    pub fn of(uri: &Uri, headers: &HeaderMap) -> Self {
        // The request target as it was sent: origin form (`/path?query`), or absolute form
        // (`http://host/path`) from a proxy.
        let uri_bytes = uri.scheme_str().map_or(0, |s| s.len() + "://".len())
            + uri.authority().map_or(0, |a| a.as_str().len())
            + uri.path_and_query().map_or(0, |p| p.as_str().len());
        let mut size = Self {
            uri_bytes,
            header_bytes: 0,
            header_fields: 0,
            largest_header: None,
        };
        for (name, value) in headers {
            let bytes = name.as_str().len() + value.len() + ": \r\n".len();
            size.header_bytes += bytes;
            size.header_fields += 1;
            if size.largest_header.as_ref().is_none_or(|(_, b)| bytes > *b) {
                size.largest_header = Some((name.as_str().to_string(), bytes));
            }
        }
        size
    }
}

/// The refusal a head of this size gets, if any; the URI is judged first.
pub fn refusal_for(size: &HeadSize) -> Option<Problem> {
    if size.uri_bytes > MAX_URI_BYTES {
        return Some(Problem::new(
            StatusCode::URI_TOO_LONG,
            "uri-too-long",
            "URI too long",
            format!(
                "the request URI is {} bytes, more than the {MAX_URI_BYTES} allowed; send long \
                 lists (machine ids, filters) in a request body, e.g. POST /api/v1/machines/return",
                size.uri_bytes
            ),
        ));
    }
    let too_large = |detail: String| {
        Some(Problem::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "request-header-fields-too-large",
            "Request header fields too large",
            detail,
        ))
    };
    if size.header_fields > MAX_HEADER_FIELDS {
        return too_large(format!(
            "the request has {} header fields, more than the {MAX_HEADER_FIELDS} allowed; send \
             fewer headers",
            size.header_fields
        ));
    }
    if size.header_bytes > MAX_HEADER_BYTES {
        let largest = size
            .largest_header
            .as_ref()
            .map(|(name, bytes)| format!(" (the largest is {name}, {bytes} bytes)"))
            .unwrap_or_default();
        return too_large(format!(
            "the request header fields are {} bytes{largest}, more than the {MAX_HEADER_BYTES} \
             allowed; send fewer or smaller headers",
            size.header_bytes
        ));
    }
    None
}

/// Middleware: refuses a request whose head is over the limits before anything else reads it.
pub async fn refuse_oversized_head(request: Request, next: Next) -> Response {
    match refusal_for(&HeadSize::of(request.uri(), request.headers())) {
        Some(problem) => problem.into_response(),
        None => next.run(request).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use rstest::rstest;

    fn size(uri_bytes: usize, header_bytes: usize, header_fields: usize) -> HeadSize {
        HeadSize {
            uri_bytes,
            header_bytes,
            header_fields,
            largest_header: Some(("cookie".into(), header_bytes)),
        }
    }

    #[rstest]
    #[case::all_at_the_limits(size(MAX_URI_BYTES, MAX_HEADER_BYTES, MAX_HEADER_FIELDS), None)]
    #[case::uri_one_over(size(MAX_URI_BYTES + 1, 10, 1), Some((414, "uri-too-long", "8193 bytes, more than the 8192")))]
    #[case::uri_wins_over_headers(size(MAX_URI_BYTES + 1, MAX_HEADER_BYTES + 1, MAX_HEADER_FIELDS + 1), Some((414, "uri-too-long", "8193")))]
    #[case::one_field_too_many(size(10, 500, MAX_HEADER_FIELDS + 1), Some((431, "request-header-fields-too-large", "101 header fields, more than the 100")))]
    #[case::one_byte_too_many(size(10, MAX_HEADER_BYTES + 1, 3), Some((431, "request-header-fields-too-large", "32769 bytes (the largest is cookie, 32769 bytes), more than the 32768")))]
    fn heads_over_a_limit_are_refused_with_the_sizes(
        #[case] size: HeadSize,
        #[case] expected: Option<(u16, &str, &str)>,
    ) {
        let got = refusal_for(&size);
        match (got, expected) {
            (None, None) => {}
            (Some(problem), Some((status, slug, needle))) => {
                assert_eq!(problem.status, status, "{problem:?}");
                assert_eq!(problem.problem_type, format!("urn:orb:problem:{slug}"));
                assert!(problem.detail.contains(needle), "{problem:?}");
            }
            (got, expected) => panic!("{size:?}: got {got:?}, expected {expected:?}"),
        }
    }

    #[rstest]
    #[case::origin_form("/api/v1/requests?limit=5", 24)]
    #[case::absolute_form("http://orb:8080/livez", 21)]
    fn the_uri_is_measured_as_it_was_sent(#[case] uri: &str, #[case] bytes: usize) {
        let size = HeadSize::of(&uri.parse().unwrap(), &HeaderMap::new());
        assert_eq!(size.uri_bytes, bytes);
        assert_eq!(size.uri_bytes, uri.len());
    }

    #[test]
    fn header_fields_are_measured_as_sent_and_the_largest_is_named() {
        let mut headers = HeaderMap::new();
        headers.insert("host", HeaderValue::from_static("orb"));
        headers.append("x-a", HeaderValue::from_static("1"));
        headers.append("x-a", HeaderValue::from_static("22"));
        headers.insert("authorization", HeaderValue::from_static("Bearer abc"));
        let size = HeadSize::of(&"/".parse().unwrap(), &headers);
        // "host: orb\r\n" + "x-a: 1\r\n" + "x-a: 22\r\n" + "authorization: Bearer abc\r\n"
        assert_eq!(size.header_bytes, 11 + 8 + 9 + 27);
        assert_eq!(size.header_fields, 4);
        assert_eq!(size.largest_header, Some(("authorization".into(), 27)));
    }
}
