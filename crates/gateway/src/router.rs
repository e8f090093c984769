//! The route table: which route takes a request, by path and method.
//!
//! Most specific wins: an exact path beats any prefix, a longer prefix beats a shorter one, and
//! file order breaks ties. A prefix matches on segment boundaries: `/users` takes `/users` and
//! `/users/...` but not `/usersx`; a prefix ending in `/` takes anything that starts with it.
//! Paths with dot segments (`.`/`..`, also percent-encoded) are refused before matching, so a
//! public route's prefix cannot be used to reach a protected path on the same upstream.

use http::Method;

use crate::config::{PathMatch, RouteSettings};

/// The ordered route table.
#[derive(Debug)]
pub struct Router {
    /// Route indices, most specific first.
    order: Vec<usize>,
    routes: Vec<RouteSettings>,
}

/// Why no route was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoRoute {
    /// The path is not in normal form (dot segments).
    BadPath,
    /// No route takes the path.
    NotFound,
    /// Routes take the path, but none with this method ([`Router::allowed`] says which).
    WrongMethod,
}

impl Router {
    /// Builds the table.
    pub fn new(routes: Vec<RouteSettings>) -> Self {
        let mut order: Vec<usize> = (0..routes.len()).collect();
        // Stable sort keeps file order among equals.
        order.sort_by_key(|&i| match &routes[i].path {
            PathMatch::Exact(_) => (0, 0),
            PathMatch::Prefix(p) => (1, usize::MAX - p.len()),
        });
        Self { order, routes }
    }

    /// The route at `index`.
    pub fn route(&self, index: usize) -> &RouteSettings {
        &self.routes[index]
    }

    /// All routes in file order.
    pub fn routes(&self) -> &[RouteSettings] {
        &self.routes
    }

    /// Finds the route for `method path` (path without the query). The path is bytes: the
    /// fast path finds it in its read buffer, where it has been checked but is not a `str`.
    ///
    /// # Errors
    /// [`NoRoute`] saying why none applies.
    pub fn find(&self, method: &Method, path: &[u8]) -> Result<usize, NoRoute> {
        if has_dot_segment(path) {
            return Err(NoRoute::BadPath);
        }
        self.order
            .iter()
            .copied()
            .find(|&i| {
                let r = &self.routes[i];
                path_matches(&r.path, path) && (r.methods.is_empty() || r.methods.contains(method))
            })
            .ok_or_else(|| {
                if self.routes.iter().any(|r| path_matches(&r.path, path)) {
                    NoRoute::WrongMethod
                } else {
                    NoRoute::NotFound
                }
            })
    }

    /// The methods some route takes `path` with, for the `Allow` header of a 405, in a fixed
    /// order. (Only called after [`NoRoute::WrongMethod`]: every route that matches the path
    /// names its methods, or it would have taken the request.)
    pub fn allowed(&self, path: &[u8]) -> Vec<Method> {
        let mut out: Vec<Method> = Vec::new();
        for r in self.routes.iter().filter(|r| path_matches(&r.path, path)) {
            for m in &r.methods {
                if !out.contains(m) {
                    out.push(m.clone());
                }
            }
        }
        const ORDER: [Method; 9] = [
            Method::GET,
            Method::HEAD,
            Method::POST,
            Method::PUT,
            Method::PATCH,
            Method::DELETE,
            Method::OPTIONS,
            Method::TRACE,
            Method::CONNECT,
        ];
        out.sort_by_key(|m| ORDER.iter().position(|o| o == m).unwrap_or(ORDER.len()));
        out
    }
}

fn path_matches(m: &PathMatch, path: &[u8]) -> bool {
    match m {
        PathMatch::Exact(p) => p.as_bytes() == path,
        PathMatch::Prefix(p) => {
            path.starts_with(p.as_bytes())
                && (p.ends_with('/') || path.len() == p.len() || path.get(p.len()) == Some(&b'/'))
        }
    }
}

fn has_dot_segment(path: &[u8]) -> bool {
    // Most paths have neither a dot nor a percent sign: one scan settles those.
    path.iter().any(|&b| b == b'.' || b == b'%') && path.split(|&b| b == b'/').any(is_dot_segment)
}

/// `.` or `..`, each dot written as itself or percent-encoded (`%2e`, `%2E`). Read in place: this
/// runs for every request.
fn is_dot_segment(seg: &[u8]) -> bool {
    let mut rest = seg;
    let mut dots = 0;
    while !rest.is_empty() && dots < 3 {
        rest = match rest {
            [b'.', tail @ ..] => tail,
            [b'%', b'2', b'e' | b'E', tail @ ..] => tail,
            _ => return false,
        };
        dots += 1;
    }
    rest.is_empty() && (dots == 1 || dots == 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(path: PathMatch, methods: &[Method]) -> RouteSettings {
        RouteSettings {
            name: format!("{path:?}"),
            path,
            methods: methods.to_vec(),
            upstream: 0,
            jwt: false,
            roles: vec![],
            json_to_xml: None,
            rate_limit: None,
        }
    }

    fn table() -> Router {
        Router::new(vec![
            route(PathMatch::Prefix("/".into()), &[]),
            route(
                PathMatch::Prefix("/users".into()),
                &[Method::GET, Method::PUT],
            ),
            route(PathMatch::Exact("/users/login".into()), &[Method::POST]),
            route(PathMatch::Prefix("/users/vehicles/".into()), &[Method::GET]),
            route(PathMatch::Prefix("/users".into()), &[Method::POST]),
        ])
    }

    #[test]
    fn most_specific_match_wins() {
        let r = table();
        assert_eq!(r.find(&Method::POST, b"/users/login"), Ok(2));
        assert_eq!(r.find(&Method::GET, b"/users/login"), Ok(1));
        assert_eq!(r.find(&Method::GET, b"/users/vehicles/7"), Ok(3));
        assert_eq!(r.find(&Method::GET, b"/users"), Ok(1));
        assert_eq!(r.find(&Method::POST, b"/users/createUser"), Ok(4));
        assert_eq!(
            r.find(&Method::DELETE, b"/users/1"),
            Ok(0),
            "falls back to /"
        );
    }

    #[test]
    fn prefixes_respect_segment_boundaries() {
        let r = Router::new(vec![route(PathMatch::Prefix("/users".into()), &[])]);
        assert_eq!(r.find(&Method::GET, b"/usersx"), Err(NoRoute::NotFound));
        assert_eq!(r.find(&Method::GET, b"/users/"), Ok(0));
        assert_eq!(r.find(&Method::GET, b"/parks"), Err(NoRoute::NotFound));
    }

    #[test]
    fn a_path_taken_with_other_methods_is_a_wrong_method() {
        let r = Router::new(vec![
            route(PathMatch::Exact("/a".into()), &[Method::PUT]),
            route(PathMatch::Prefix("/".into()), &[Method::POST, Method::GET]),
            route(PathMatch::Prefix("/b".into()), &[Method::DELETE]),
        ]);
        assert_eq!(r.find(&Method::PATCH, b"/a"), Err(NoRoute::WrongMethod));
        assert_eq!(r.allowed(b"/a"), [Method::GET, Method::POST, Method::PUT]);
        assert_eq!(
            r.allowed(b"/b/1"),
            [Method::GET, Method::POST, Method::DELETE]
        );
        let only = Router::new(vec![route(PathMatch::Exact("/a".into()), &[Method::POST])]);
        assert_eq!(only.find(&Method::GET, b"/a"), Err(NoRoute::WrongMethod));
        assert_eq!(only.find(&Method::GET, b"/b"), Err(NoRoute::NotFound));
    }

    #[test]
    fn dot_segments_are_refused() {
        let r = table();
        for p in [
            "/barriers/../users/getAllUsers",
            "/./users",
            "/users/%2e%2E/x",
            "/..",
        ] {
            assert_eq!(
                r.find(&Method::GET, p.as_bytes()),
                Err(NoRoute::BadPath),
                "{p}"
            );
        }
        assert_eq!(r.find(&Method::GET, b"/users/.hidden"), Ok(1));
    }

    #[test]
    fn dot_segments_are_told_apart_from_names_with_dots() {
        for seg in [".", "..", "%2e", "%2E", "%2e.", ".%2E", "%2e%2e"] {
            assert!(is_dot_segment(seg.as_bytes()), "{seg}");
        }
        for seg in [
            "",
            "...",
            "%2e%2e%2e",
            ".a",
            "a.",
            "%2",
            "%2f",
            "%2e%",
            "%2e%2",
            "%%2e",
            "%2.",
        ] {
            assert!(!is_dot_segment(seg.as_bytes()), "{seg}");
        }
    }

    #[test]
    fn dot_segments_are_what_decoding_the_dots_gives() {
        // The definition, with allocations: every segment of up to six of these characters.
        let decoded = |seg: &str| {
            let d = seg.replace("%2e", ".").replace("%2E", ".");
            d == "." || d == ".."
        };
        let alphabet = ['.', '%', '2', 'e', 'E', 'a'];
        let mut segs = vec![String::new()];
        for _ in 0..6 {
            let longer: Vec<String> = segs
                .iter()
                .filter(|s| s.len() == segs.last().map_or(0, String::len))
                .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
                .collect();
            segs.extend(longer);
        }
        assert_eq!(segs.len(), (0..=6).map(|n| 6usize.pow(n)).sum::<usize>());
        for seg in &segs {
            assert_eq!(is_dot_segment(seg.as_bytes()), decoded(seg), "{seg:?}");
        }
    }
}
