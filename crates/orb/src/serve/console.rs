//! The web console at `/ui/`: static files built into the binary (no Node toolchain, no CDN,
//! nothing to install next to it): a page, a style sheet and the script's ES modules. The
//! page is a client of the same REST API every other client uses; it holds no secret, so it
//! is served without a token and asks for one itself when the API answers 401. `orb serve
//! --no-ui`, `orb server start --api-only` or config.json's `serve.ui.enabled: false` leave
//! it out.

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

use super::AppState;

/// Where the console lives; every path under it is public (see `auth::required_role`).
pub const CONSOLE_PREFIX: &str = "/ui";

/// One of the console's files: its name under `/ui/`, its type and the copy built in.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    built_in: &'static str,
}

macro_rules! assets {
    ($($name:literal => $kind:expr),* $(,)?) => {
        &[$(Asset {
            name: $name,
            content_type: $kind,
            built_in: include_str!(concat!("../../ui/", $name)),
        }),*]
    };
}

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// Every file of the console; anything else under `/ui/` is a 404.
static ASSETS: &[Asset] = assets![
    "index.html" => HTML,
    "app.css" => CSS,
    "app.js" => JS,
    "core.js" => JS,
    "overview.js" => JS,
    "machines.js" => JS,
    "requests.js" => JS,
    "templates.js" => JS,
    "config.js" => JS,
];

/// The page may load only its own scripts and style and talk only to its own origin: a
/// machine name or a pod event that slipped past the page's escaping still cannot load or
/// send anything elsewhere.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

impl Asset {
    /// The file's text: in debug builds from `$ORB_UI_DIR` when that is set (so a change to
    /// the page shows on reload, without a rebuild), else the copy built into the binary.
    fn text(&self) -> std::borrow::Cow<'static, str> {
        #[cfg(debug_assertions)]
        if let Some(dir) = std::env::var_os("ORB_UI_DIR") {
            let path = std::path::Path::new(&dir).join(self.name);
            match std::fs::read_to_string(&path) {
                Ok(text) => return text.into(),
                Err(e) => tracing::warn!(
                    "ORB_UI_DIR: cannot read {} ({e}); serving the built-in copy",
                    path.display()
                ),
            }
        }
        self.built_in.into()
    }

    fn response(&'static self) -> Response {
        let mut response = (
            [(header::CONTENT_TYPE, self.content_type)],
            self.text().into_owned(),
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
        // The files change with the binary; revalidating each load is cheap and never
        // leaves an old page talking to a new server.
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        response
    }
}

/// The console's routes, to merge into the service.
pub fn console_routes() -> Router<AppState> {
    let index = &ASSETS[0];
    let mut routes = Router::new()
        .route(
            CONSOLE_PREFIX,
            get(|| async { Redirect::permanent("/ui/") }),
        )
        .route("/ui/", get(move || async move { index.response() }));
    for asset in ASSETS {
        routes = routes.route(
            &format!("/ui/{}", asset.name),
            get(move || async move { asset.response() }),
        );
    }
    routes
}

/// Whether a path belongs to the console (served without a token: it carries no data).
pub fn is_console_path(path: &str) -> bool {
    path == CONSOLE_PREFIX || path.starts_with("/ui/")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asset(name: &str) -> &'static Asset {
        ASSETS.iter().find(|a| a.name == name).unwrap()
    }

    #[test]
    fn the_page_loads_only_its_own_files() {
        let index = asset("index.html").built_in;
        assert!(index.contains("app.js"), "index.html loads app.js");
        assert!(index.contains("app.css"), "index.html loads app.css");
        for a in ASSETS {
            for outside in [
                "src=\"http",
                "href=\"http",
                "url(http",
                "@import",
                "src=\"//",
                "from 'http",
                "from \"http",
            ] {
                assert!(
                    !a.built_in.contains(outside),
                    "{}: the console must not load anything from elsewhere ({outside})",
                    a.name
                );
            }
        }
    }

    #[test]
    fn every_module_the_scripts_import_is_served() {
        let mut imports = 0;
        for a in ASSETS.iter().filter(|a| a.name.ends_with(".js")) {
            // `} from './core.js';` ends a multi-line import as well as a one-line one.
            for target in a.built_in.split("from './").skip(1) {
                let target = target.split('\'').next().unwrap_or_default();
                imports += 1;
                assert!(
                    ASSETS.iter().any(|b| b.name == target),
                    "{} imports ./{target}, which the server does not serve; add it to ASSETS",
                    a.name
                );
            }
        }
        assert!(
            imports >= 5,
            "the entry imports the page modules ({imports} imports seen)"
        );
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
