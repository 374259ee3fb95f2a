//! IP address allocation from a CIDR pool, the way a cloud hands out addresses.
//!
//! Allocation is next-fit from a persisted cursor: after handing out `x` the next search starts
//! at `x + 1` and wraps around. So a released address is not reused at once (real clouds avoid
//! that too: a stale DNS record or firewall rule would point at somebody else's load balancer),
//! and an address in use is never handed out.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

/// The usable addresses of a CIDR.
///
/// IPv4 prefixes shorter than /31 lose their network and broadcast addresses; /31 (RFC 3021)
/// and /32 use every address. IPv6 prefixes shorter than /127 lose the all-zeros address (the
/// subnet-router anycast address, RFC 4291); IPv6 has no broadcast.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool {
    cidr: IpNet,
    first: u128,
    last: u128,
}

impl Pool {
    /// The pool of `cidr` (host bits are ignored: `10.0.0.5/24` is `10.0.0.0/24`).
    pub fn new(cidr: IpNet) -> Self {
        let cidr = cidr.trunc();
        let (network, broadcast, skip_ends) = match cidr {
            IpNet::V4(n) => (
                u128::from(u32::from(n.network())),
                u128::from(u32::from(n.broadcast())),
                n.prefix_len() < 31,
            ),
            IpNet::V6(n) => (
                u128::from(n.network()),
                u128::from(n.broadcast()),
                n.prefix_len() < 127,
            ),
        };
        let (first, last) = match (cidr, skip_ends) {
            (IpNet::V4(_), true) => (network + 1, broadcast - 1),
            (IpNet::V6(_), true) => (network + 1, broadcast),
            (_, false) => (network, broadcast),
        };
        Self { cidr, first, last }
    }

    /// The CIDR the pool was built from (normalized).
    pub fn cidr(&self) -> IpNet {
        self.cidr
    }

    /// How many addresses the pool can hand out (saturating at `u128::MAX`).
    pub fn size(&self) -> u128 {
        (self.last - self.first).saturating_add(1)
    }

    /// Whether `ip` is an address this pool could hand out.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.cidr, ip) {
            (IpNet::V4(_), IpAddr::V4(_)) | (IpNet::V6(_), IpAddr::V6(_)) => {
                let n = to_u128(ip);
                self.first <= n && n <= self.last
            }
            _ => false,
        }
    }

    /// Next free address after `cursor` (wrapping around), or `None` when every address is in use.
    /// The caller stores the answer as the new cursor.
    pub fn allocate(&self, cursor: Option<IpAddr>, in_use: impl Fn(IpAddr) -> bool) -> Option<IpAddr> {
        let start = match cursor.filter(|c| self.contains(*c)) {
            Some(c) if to_u128(c) < self.last => to_u128(c) + 1,
            _ => self.first,
        };
        let mut n = start;
        // Each step either finds a free address or skips one in use, so this loop is bounded by
        // the pool size; it ends after one full turn.
        loop {
            let ip = self.addr_at(n);
            if !in_use(ip) {
                return Some(ip);
            }
            n = if n == self.last { self.first } else { n + 1 };
            if n == start {
                return None;
            }
        }
    }

    /// Checks that `ip` may be handed out on request.
    pub fn check_requested(&self, ip: IpAddr, in_use: impl Fn(IpAddr) -> bool) -> Result<(), String> {
        if !self.contains(ip) {
            return Err(format!(
                "{ip} is not an address of the pool {} (usable: {} to {})",
                self.cidr,
                self.addr_at(self.first),
                self.addr_at(self.last)
            ));
        }
        if in_use(ip) {
            return Err(format!("{ip} is already in use"));
        }
        Ok(())
    }

    fn addr_at(&self, n: u128) -> IpAddr {
        match self.cidr {
            // n is within an IPv4 network here, so it fits in u32.
            IpNet::V4(_) => IpAddr::V4(Ipv4Addr::from(u32::try_from(n).unwrap_or(u32::MAX))),
            IpNet::V6(_) => IpAddr::V6(Ipv6Addr::from(n)),
        }
    }
}

fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn pool(s: &str) -> Pool {
        Pool::new(s.parse().unwrap())
    }

    #[test]
    fn usable_ranges() {
        // (cidr, first, last, size)
        let cases = [
            ("203.0.113.0/24", "203.0.113.1", "203.0.113.254", 254),
            ("10.0.0.0/30", "10.0.0.1", "10.0.0.2", 2),
            ("10.0.0.0/31", "10.0.0.0", "10.0.0.1", 2),
            ("10.0.0.7/32", "10.0.0.7", "10.0.0.7", 1),
            ("10.0.0.77/24", "10.0.0.1", "10.0.0.254", 254),
            ("2001:db8::/126", "2001:db8::1", "2001:db8::3", 3),
            ("2001:db8::/127", "2001:db8::", "2001:db8::1", 2),
        ];
        for (cidr, first, last, size) in cases {
            let p = pool(cidr);
            assert_eq!(p.size(), size, "{cidr}");
            assert_eq!(p.allocate(None, |_| false), Some(ip(first)), "{cidr}");
            assert!(p.contains(ip(first)) && p.contains(ip(last)), "{cidr}");
            let mut all = Vec::new();
            let mut cursor = None;
            while let Some(a) = p.allocate(cursor, |x| all.contains(&x)) {
                all.push(a);
                cursor = Some(a);
            }
            assert_eq!(all.len() as u128, size, "{cidr}: {all:?}");
            assert_eq!(all.last(), Some(&ip(last)), "{cidr}");
        }
    }

    #[test]
    fn contains_refuses_reserved_and_foreign_addresses() {
        let p = pool("192.0.2.0/24");
        for (addr, want) in [
            ("192.0.2.0", false),
            ("192.0.2.255", false),
            ("192.0.2.1", true),
            ("192.0.3.1", false),
            ("::1", false),
        ] {
            assert_eq!(p.contains(ip(addr)), want, "{addr}");
        }
    }

    #[test]
    fn released_address_is_not_reused_at_once() {
        let p = pool("10.1.0.0/29"); // .1 to .6
        let mut used = HashSet::new();
        let a = p.allocate(None, |x| used.contains(&x)).unwrap();
        used.insert(a);
        used.remove(&a);
        let b = p.allocate(Some(a), |x| used.contains(&x)).unwrap();
        assert_ne!(a, b);
        assert_eq!(b, ip("10.1.0.2"));
    }

    #[test]
    fn wraps_around_and_skips_addresses_in_use() {
        let p = pool("10.1.0.0/29");
        let used: HashSet<IpAddr> = ["10.1.0.1", "10.1.0.3"].iter().map(|s| ip(s)).collect();
        let cases = [
            (Some("10.1.0.6"), Some("10.1.0.2")),
            (Some("10.1.0.2"), Some("10.1.0.4")),
            (None, Some("10.1.0.2")),
            // a cursor outside the pool (the pool was changed) restarts at the beginning
            (Some("172.16.0.1"), Some("10.1.0.2")),
        ];
        for (cursor, want) in cases {
            let got = p.allocate(cursor.map(ip), |x| used.contains(&x));
            assert_eq!(got, want.map(ip), "cursor {cursor:?}");
        }
    }

    #[test]
    fn full_pool_allocates_nothing() {
        let p = pool("10.1.0.0/30");
        assert_eq!(p.allocate(Some(ip("10.1.0.1")), |_| true), None);
    }

    #[test]
    fn requested_addresses() {
        let p = pool("203.0.113.0/24");
        let used = [ip("203.0.113.9")];
        let cases = [
            ("203.0.113.10", Ok(())),
            ("203.0.113.9", Err("already in use")),
            ("203.0.113.0", Err("not an address of the pool")),
            ("198.51.100.1", Err("not an address of the pool")),
        ];
        for (addr, want) in cases {
            let got = p.check_requested(ip(addr), |x| used.contains(&x));
            match (got, want) {
                (Ok(()), Ok(())) => {}
                (Err(e), Err(w)) => assert!(e.contains(w), "{addr}: {e}"),
                (got, want) => panic!("{addr}: got {got:?}, want {want:?}"),
            }
        }
    }
}
