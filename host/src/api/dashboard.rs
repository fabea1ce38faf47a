//! The dashboard: `GET /` serves a page that shows the queue, its task types, dead letters,
//! tasks, plugins and alerts, and updates itself by polling the API every few seconds.
//!
//! The page is plain HTML, CSS and JavaScript modules from `host/dashboard/` (no build step),
//! with the charting library uPlot vendored under `host/dashboard/vendor/uplot/`. Every file is
//! compiled into the binary with `include_bytes!`, so a host serves its dashboard offline and
//! the page never reaches for a CDN. The list below is the whole of what is shipped; a unit
//! test checks it against the folder. (An embedding crate would walk the folder for us, but a
//! dozen files do not need a proc macro, and the explicit list shows what is served.)
//!
//! Assets live under `/ui/<version>/…`, where the version is a hash of all of them: a browser
//! keeps them for a year, and a host with other assets gives them another address. The page
//! itself (`GET /`) is revalidated on every load, so it always names the current version.
//!
//! Every response carries a Content-Security-Policy that allows scripts, styles and requests
//! from this origin only (no inline script). The page and its assets are no secret and need
//! no token (see [`super::auth::access`]); the data the page shows comes from the API, which
//! asks for the token as always: the page asks the person for it and keeps it in
//! `sessionStorage`. Changes are JSON POSTs from the page's own origin, which the Origin check
//! in [`super::guard`] lets through and refuses from any other site.
//!
//! These routes are not API operations, so they are not in the OpenAPI description.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};
use std::sync::{Arc, OnceLock};

use super::AppState;
use super::error::ApiError;

/// One embedded file.
struct Asset {
    /// Its path under `host/dashboard/` and under `/ui/<version>/`.
    path: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

macro_rules! asset {
    ($path:literal, $content_type:expr) => {
        Asset {
            path: $path,
            content_type: $content_type,
            body: include_bytes!(concat!("../../dashboard/", $path)),
        }
    };
}

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const TEXT: &str = "text/plain; charset=utf-8";

/// Every file the dashboard is made of, `index.html` (served at `/`) included.
static ASSETS: &[Asset] = &[
    asset!("index.html", HTML),
    asset!("style.css", CSS),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("dom.js", JS),
    asset!("charts.js", JS),
    asset!("pages/overview.js", JS),
    asset!("pages/types.js", JS),
    asset!("pages/dead_letters.js", JS),
    asset!("pages/task.js", JS),
    asset!("pages/plugins.js", JS),
    asset!("pages/alerts.js", JS),
    asset!("vendor/uplot/uPlot.iife.min.js", JS),
    asset!("vendor/uplot/uPlot.min.css", CSS),
    asset!("vendor/uplot/LICENSE", TEXT),
    asset!("vendor/uplot/README.md", TEXT),
];

/// What the page may load and run: its own origin's scripts, styles and API, nothing inline
/// (uPlot sizes its elements through the DOM, which a policy does not govern), never framed.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; \
base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The hash of every asset: part of their addresses, so a browser never mixes versions.
fn version() -> &'static str {
    static VERSION: OnceLock<String> = OnceLock::new();
    VERSION.get_or_init(|| {
        let mut hash = Sha256::new();
        for asset in ASSETS {
            hash.update(asset.path.as_bytes());
            hash.update((asset.body.len() as u64).to_le_bytes());
            hash.update(asset.body);
        }
        hex::encode(&hash.finalize()[..6])
    })
}

/// `index.html` with the assets' version filled in.
fn index_html() -> &'static str {
    static PAGE: OnceLock<String> = OnceLock::new();
    PAGE.get_or_init(|| {
        let template = find("index.html").expect("index.html is embedded");
        String::from_utf8_lossy(template.body).replace("{{version}}", version())
    })
}

fn find(path: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|asset| asset.path == path)
}

/// The dashboard's routes (outside the OpenAPI description).
pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/", get(index))
        .route("/ui/{version}/{*path}", get(asset))
}

/// `GET /`: the page.
async fn index() -> Response {
    respond(HTML, index_html().as_bytes(), "no-cache")
}

/// `GET /ui/{version}/{path}`: an asset. An old version's address (a page loaded before the
/// host was upgraded) still gets today's file, but not for keeps.
async fn asset(Path((asked, path)): Path<(String, String)>) -> Result<Response, ApiError> {
    let asset = find(&path)
        .filter(|asset| asset.path != "index.html")
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("the dashboard has no file {path}; open / for the dashboard"),
            )
        })?;
    let cache = if asked == version() {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    Ok(respond(asset.content_type, asset.body, cache))
}

fn respond(content_type: &'static str, body: &'static [u8], cache: &'static str) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    let mut set = |name: header::HeaderName, value: &'static str| {
        headers.insert(name, HeaderValue::from_static(value));
    };
    set(header::CONTENT_TYPE, content_type);
    set(header::CACHE_CONTROL, cache);
    set(header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY);
    set(header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(header::X_FRAME_OPTIONS, "DENY");
    set(header::REFERRER_POLICY, "no-referrer");
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Every file under `host/dashboard/`, relative to it.
    fn files(dir: &std::path::Path, base: &std::path::Path, out: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                files(&path, base, out);
            } else {
                let relative = path.strip_prefix(base).unwrap();
                out.insert(relative.to_string_lossy().replace('\\', "/"));
            }
        }
    }

    #[test]
    fn every_file_of_the_dashboard_folder_is_embedded() {
        let folder = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("dashboard");
        let mut on_disk = BTreeSet::new();
        files(&folder, &folder, &mut on_disk);
        let embedded: BTreeSet<String> = ASSETS.iter().map(|a| a.path.to_string()).collect();
        assert_eq!(embedded, on_disk, "add new dashboard files to ASSETS");
    }

    #[test]
    fn content_types_follow_extensions() {
        for asset in ASSETS {
            let expected = match asset.path.rsplit('.').next() {
                Some("js") => JS,
                Some("css") => CSS,
                Some("html") => HTML,
                _ => TEXT,
            };
            assert_eq!(asset.content_type, expected, "{}", asset.path);
        }
    }

    #[test]
    fn the_page_names_the_current_version_and_no_inline_script() {
        let page = index_html();
        assert!(!page.contains("{{version}}"));
        assert!(page.contains(&format!("/ui/{}/app.js", version())));
        // Every <script> has a src: the policy would refuse an inline one.
        for script in page.split("<script").skip(1) {
            let tag = script.split('>').next().unwrap();
            assert!(tag.contains("src="), "inline script: <script{tag}>");
        }
        assert_eq!(version().len(), 12);
    }
}
