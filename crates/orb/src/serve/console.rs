//! The web console at `/ui/`: three static files built into the binary (no Node toolchain,
//! no CDN, nothing to install next to it). The page is a client of the same REST API every
//! other client uses; it holds no secret, so it is served without a token and asks for one
//! itself when the API answers 401. `orb serve --no-ui`, `orb server start --api-only` or
//! config.json's `serve.ui.enabled: false` leave it out.

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

use super::AppState;

/// Where the console lives; every path under it is public (see `auth::required_role`).
pub const CONSOLE_PREFIX: &str = "/ui";

const INDEX_HTML: &str = include_str!("../../ui/index.html");
const APP_JS: &str = include_str!("../../ui/app.js");
const APP_CSS: &str = include_str!("../../ui/app.css");

/// The page may load only its own script and style and talk only to its own origin: a
/// machine name or a pod event that slipped past the page's escaping still cannot load or
/// send anything elsewhere.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// One of the console's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Asset {
    Index,
    Script,
    Style,
}

impl Asset {
    fn file_name(self) -> &'static str {
        match self {
            Asset::Index => "index.html",
            Asset::Script => "app.js",
            Asset::Style => "app.css",
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            Asset::Index => "text/html; charset=utf-8",
            Asset::Script => "text/javascript; charset=utf-8",
            Asset::Style => "text/css; charset=utf-8",
        }
    }

    fn built_in(self) -> &'static str {
        match self {
            Asset::Index => INDEX_HTML,
            Asset::Script => APP_JS,
            Asset::Style => APP_CSS,
        }
    }

    /// The file's text: in debug builds from `$ORB_UI_DIR` when that is set (so a change to
    /// the page shows on reload, without a rebuild), else the copy built into the binary.
    fn text(self) -> std::borrow::Cow<'static, str> {
        #[cfg(debug_assertions)]
        if let Some(dir) = std::env::var_os("ORB_UI_DIR") {
            let path = std::path::Path::new(&dir).join(self.file_name());
            match std::fs::read_to_string(&path) {
                Ok(text) => return text.into(),
                Err(e) => tracing::warn!(
                    "ORB_UI_DIR: cannot read {} ({e}); serving the built-in copy",
                    path.display()
                ),
            }
        }
        self.built_in().into()
    }
}

async fn serve_asset(asset: Asset) -> Response {
    let mut response = (
        [(header::CONTENT_TYPE, asset.content_type())],
        asset.text().into_owned(),
    )
        .into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // The files change with the binary; revalidating each load is cheap (three small files)
    // and never leaves an old page talking to a new server.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// The console's routes, to merge into the service.
pub fn console_routes() -> Router<AppState> {
    Router::new()
        .route(
            CONSOLE_PREFIX,
            get(|| async { Redirect::permanent("/ui/") }),
        )
        .route("/ui/", get(|| serve_asset(Asset::Index)))
        .route("/ui/index.html", get(|| serve_asset(Asset::Index)))
        .route("/ui/app.js", get(|| serve_asset(Asset::Script)))
        .route("/ui/app.css", get(|| serve_asset(Asset::Style)))
}

/// Whether a path belongs to the console (served without a token: it carries no data).
pub fn is_console_path(path: &str) -> bool {
    path == CONSOLE_PREFIX || path.starts_with("/ui/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_only_its_own_files() {
        assert!(INDEX_HTML.contains("app.js"), "index.html loads app.js");
        assert!(INDEX_HTML.contains("app.css"), "index.html loads app.css");
        for text in [INDEX_HTML, APP_JS, APP_CSS] {
            for outside in [
                "src=\"http",
                "href=\"http",
                "url(http",
                "@import",
                "src=\"//",
            ] {
                assert!(
                    !text.contains(outside),
                    "the console must not load anything from elsewhere ({outside})"
                );
            }
        }
    }

    #[test]
    fn console_paths_are_the_ui_prefix_only() {
        assert!(is_console_path("/ui"));
        assert!(is_console_path("/ui/"));
        assert!(is_console_path("/ui/app.js"));
        assert!(!is_console_path("/uix"));
        assert!(!is_console_path("/api/v1/ui/"));
    }
}
