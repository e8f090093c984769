//! Per-route rate limits (`rate_limit` on a route): a token bucket per client address, or per
//! token subject, shared by every worker, in the manner of nginx's `limit_req` and Envoy's local
//! rate limit. A request over the limit is answered 429 with `Retry-After` and counted in
//! `pms_gateway_rate_limited_total`; it never reaches the upstream.
//!
//! The buckets are `governor`'s GCRA cells in a concurrent map. A key whose bucket has filled up
//! again holds nothing a new bucket would not, so [`RateLimits::prune`] drops those keys; the
//! gateway calls it every [`PRUNE_EVERY`], which bounds the map by the keys seen in that time.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use pms_auth::verify::Claims;
use prometheus_client::metrics::counter::Counter;

use crate::config::{LimitBy, RateLimitSettings, RouteSettings};
use crate::forwarder::{self, Forwarder};
use crate::metrics::Metrics;
use crate::respond::GatewayError;

/// How often buckets that have filled up again are dropped.
pub(crate) const PRUNE_EVERY: Duration = Duration::from_secs(10);

/// Whose bucket a request draws from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    /// An IPv4 address, or an IPv6 address with its last 64 bits cleared: one host is usually
    /// given a whole /64, and would otherwise have 2⁶⁴ buckets.
    Addr(IpAddr),
    /// A token's `sub` claim.
    Subject(Box<str>),
}

impl Key {
    fn client(ip: IpAddr) -> Self {
        Self::Addr(match ip {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
            },
            v4 => v4,
        })
    }
}

/// One route's limit.
#[derive(Debug)]
pub(crate) struct RouteLimit {
    by: LimitBy,
    buckets: DefaultKeyedRateLimiter<Key>,
    refused: Counter,
}

impl RouteLimit {
    fn new(settings: &RateLimitSettings, refused: Counter) -> Self {
        // `with_period` is `None` for a zero period only, which resolving the config rules out.
        let quota = Quota::with_period(settings.period)
            .unwrap_or_else(|| Quota::per_second(NonZeroU32::MAX))
            .allow_burst(settings.burst);
        Self {
            by: settings.by,
            buckets: RateLimiter::keyed(quota),
            refused,
        }
    }

    /// Takes a request from `client` out of its bucket on a route limited by address; lets
    /// everything through on a route limited by subject (checked after authentication).
    ///
    /// # Errors
    /// [`GatewayError::RateLimited`] when the bucket is empty.
    pub(crate) fn admit_client(&self, client: IpAddr) -> Result<(), GatewayError> {
        match self.by {
            LimitBy::Client => self.take(&Key::client(client)),
            LimitBy::Subject => Ok(()),
        }
    }

    /// Takes an authenticated request out of its subject's bucket on a route limited by
    /// subject (a token without `sub` draws from its address's bucket); lets everything through
    /// on a route limited by address.
    ///
    /// # Errors
    /// [`GatewayError::RateLimited`] when the bucket is empty.
    pub(crate) fn admit_subject(
        &self,
        client: IpAddr,
        claims: &Claims,
    ) -> Result<(), GatewayError> {
        match (self.by, claims.text("sub")) {
            (LimitBy::Client, _) => Ok(()),
            (LimitBy::Subject, Some(sub)) => self.take(&Key::Subject(sub.into())),
            (LimitBy::Subject, None) => self.take(&Key::client(client)),
        }
    }

    fn take(&self, key: &Key) -> Result<(), GatewayError> {
        self.buckets.check_key(key).map_err(|not_until| {
            self.refused.inc();
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            GatewayError::RateLimited {
                retry_after_s: whole_seconds(wait),
            }
        })
    }
}

/// `Retry-After` is in whole seconds: rounded up, and at least 1 (a 0 invites a retry storm).
fn whole_seconds(wait: Duration) -> u64 {
    let s = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    s.max(1)
}

/// Every route's limit, by route index, and the forwarder trusted to name its clients; shared
/// by the workers.
#[derive(Debug, Default)]
pub(crate) struct RateLimits {
    routes: Vec<Option<RouteLimit>>,
    forwarder: Option<Forwarder>,
}

impl RateLimits {
    /// Buckets for the routes that have a limit, counting refusals in `metrics`; the clients
    /// `forwarder` names count as themselves.
    pub(crate) fn new(
        routes: &[RouteSettings],
        forwarder: Option<Forwarder>,
        metrics: &Metrics,
    ) -> Self {
        Self {
            routes: routes
                .iter()
                .map(|r| {
                    r.rate_limit
                        .as_ref()
                        .map(|l| RouteLimit::new(l, metrics.rate_limited(&r.name)))
                })
                .collect(),
            forwarder,
        }
    }

    /// Route `index`'s limit, if it has one.
    pub(crate) fn route(&self, index: usize) -> Option<&RouteLimit> {
        self.routes.get(index).and_then(Option::as_ref)
    }

    /// Whom a request from `peer` on route `index` counts as: on a route limited by client, the
    /// person the trusted forwarder names in `headers` ([`forwarder::client`]); elsewhere the
    /// peer, whatever the headers say.
    ///
    /// # Errors
    /// As [`forwarder::client`], on a route limited by client.
    pub(crate) fn client(
        &self,
        index: usize,
        peer: IpAddr,
        headers: &http::HeaderMap,
    ) -> Result<IpAddr, GatewayError> {
        match self.route(index) {
            Some(limit) if limit.by == LimitBy::Client => {
                forwarder::client(self.forwarder.as_ref(), peer, headers)
            }
            _ => Ok(peer),
        }
    }

    /// Whether any route has a limit.
    pub(crate) fn any(&self) -> bool {
        self.routes.iter().any(Option::is_some)
    }

    /// Drops the buckets that have filled up again.
    pub(crate) fn prune(&self) {
        for limit in self.routes.iter().flatten() {
            limit.buckets.retain_recent();
            limit.buckets.shrink_to_fit();
        }
    }

    /// Buckets held now, all routes together.
    #[cfg(test)]
    fn keys(&self) -> usize {
        self.routes.iter().flatten().map(|l| l.buckets.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn limits(by: LimitBy, per: Duration, burst: u32) -> RateLimits {
        let settings = RateLimitSettings {
            by,
            period: per,
            burst: NonZeroU32::new(burst).expect("burst ≥ 1"),
        };
        RateLimits {
            routes: vec![None, Some(RouteLimit::new(&settings, Counter::default()))],
            forwarder: None,
        }
    }

    fn claims(json: serde_json::Value) -> Claims {
        match json {
            serde_json::Value::Object(map) => Claims(map),
            other => panic!("claims are an object, not {other}"),
        }
    }

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn a_client_gets_its_burst_then_429_with_the_wait_in_whole_seconds() {
        let l = limits(LimitBy::Client, HOUR, 2);
        let route = l.route(1).expect("route 1 is limited");
        assert!(l.route(0).is_none());
        let ip = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
        assert_eq!(route.admit_client(ip), Ok(()));
        assert_eq!(route.admit_client(ip), Ok(()));
        match route.admit_client(ip) {
            Err(GatewayError::RateLimited { retry_after_s }) => {
                assert!(
                    (3590..=3600).contains(&retry_after_s),
                    "one request comes back per hour: {retry_after_s}"
                );
            }
            other => panic!("the third request is refused: {other:?}"),
        }
        assert_eq!(route.refused.get(), 1);
        // Another client has a bucket of its own.
        let other = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2));
        assert_eq!(route.admit_client(other), Ok(()));
    }

    #[test]
    fn one_ipv6_host_is_one_client_and_a_mapped_ipv4_address_is_its_ipv4_self() {
        let l = limits(LimitBy::Client, HOUR, 1);
        let route = l.route(1).expect("limited");
        let a: Ipv6Addr = "2001:db8:1:2::1".parse().expect("address");
        let b: Ipv6Addr = "2001:db8:1:2:ffff:ffff:ffff:ffff".parse().expect("address");
        assert_eq!(route.admit_client(a.into()), Ok(()));
        assert!(
            route.admit_client(b.into()).is_err(),
            "same /64, same bucket"
        );
        let next: Ipv6Addr = "2001:db8:1:3::1".parse().expect("address");
        assert_eq!(route.admit_client(next.into()), Ok(()));

        let v4 = Ipv4Addr::new(198, 51, 100, 7);
        assert_eq!(route.admit_client(v4.to_ipv6_mapped().into()), Ok(()));
        assert!(route.admit_client(v4.into()).is_err());
    }

    #[test]
    fn a_subject_limit_follows_the_token_not_the_address() {
        let l = limits(LimitBy::Subject, HOUR, 1);
        let route = l.route(1).expect("limited");
        let (here, there) = (
            IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
            IpAddr::V4(Ipv4Addr::new(192, 0, 2, 2)),
        );
        // Before authentication nothing is taken.
        for _ in 0..3 {
            assert_eq!(route.admit_client(here), Ok(()));
        }
        let ana = claims(serde_json::json!({"sub": "ana@example.org"}));
        let rui = claims(serde_json::json!({"sub": "rui@example.org"}));
        assert_eq!(route.admit_subject(here, &ana), Ok(()));
        assert!(route.admit_subject(there, &ana).is_err(), "same subject");
        assert_eq!(route.admit_subject(here, &rui), Ok(()));
        // No `sub`: the address's bucket.
        let anonymous = claims(serde_json::json!({"role": "CUSTOMER"}));
        assert_eq!(route.admit_subject(there, &anonymous), Ok(()));
        assert!(route.admit_subject(there, &anonymous).is_err());
    }

    #[test]
    fn pruning_drops_full_buckets_and_keeps_the_ones_still_draining() {
        let fast = limits(LimitBy::Client, Duration::from_nanos(1), 1);
        let route = fast.route(1).expect("limited");
        route
            .admit_client(IpAddr::V4(Ipv4Addr::LOCALHOST))
            .expect("first");
        assert_eq!(fast.keys(), 1);
        std::thread::sleep(Duration::from_millis(1));
        fast.prune();
        assert_eq!(fast.keys(), 0, "refilled within a nanosecond");

        let slow = limits(LimitBy::Client, HOUR, 1);
        let route = slow.route(1).expect("limited");
        route
            .admit_client(IpAddr::V4(Ipv4Addr::LOCALHOST))
            .expect("first");
        slow.prune();
        assert_eq!(slow.keys(), 1, "still an hour from full");
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds_and_never_says_zero() {
        assert_eq!(whole_seconds(Duration::ZERO), 1);
        assert_eq!(whole_seconds(Duration::from_millis(1)), 1);
        assert_eq!(whole_seconds(Duration::from_millis(1000)), 1);
        assert_eq!(whole_seconds(Duration::from_millis(1001)), 2);
    }
}
