//! Service cluster IP and node port allocation (`pkg/registry/core/service/ipallocator`,
//! `.../portallocator`): a bitmap over a configured range, shared by all services.

use std::collections::HashSet;
use std::net::IpAddr;
use std::ops::RangeInclusive;

use ipnet::IpNet;

#[derive(Debug)]
pub struct Allocators {
    pub cidr: IpNet,
    used_ips: HashSet<IpAddr>,
    next_ip: u128,
    pub ports: RangeInclusive<u16>,
    used_ports: HashSet<u16>,
    next_port: u16,
}

fn ip_to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v) => u128::from(u32::from(v)),
        IpAddr::V6(v) => u128::from(v),
    }
}

fn u128_to_ip(net: &IpNet, n: u128) -> Option<IpAddr> {
    match net {
        IpNet::V4(_) => u32::try_from(n).ok().map(|v| IpAddr::V4(v.into())),
        IpNet::V6(_) => Some(IpAddr::V6(n.into())),
    }
}

impl Allocators {
    pub fn new(cidr: IpNet, ports: RangeInclusive<u16>) -> Self {
        let next_port = *ports.start();
        Allocators {
            cidr,
            used_ips: HashSet::new(),
            next_ip: 1,
            ports,
            used_ports: HashSet::new(),
            next_port,
        }
    }

    /// Usable offsets exclude the network address (and, for IPv4, the broadcast address).
    fn ip_offsets(&self) -> (u128, u128) {
        let base = ip_to_u128(self.cidr.network());
        let last = ip_to_u128(self.cidr.broadcast());
        let size = last - base + 1;
        let hi = if matches!(self.cidr, IpNet::V4(_)) {
            size.saturating_sub(2)
        } else {
            size.saturating_sub(1)
        };
        (1, hi)
    }

    pub fn first_ip(&self) -> Option<IpAddr> {
        u128_to_ip(&self.cidr, ip_to_u128(self.cidr.network()) + 1)
    }

    /// Reserves a specific IP; the error text is the real allocator's.
    pub fn reserve_ip(&mut self, ip: IpAddr) -> Result<(), String> {
        let (lo, hi) = self.ip_offsets();
        let off = ip_to_u128(ip).wrapping_sub(ip_to_u128(self.cidr.network()));
        if !self.cidr.contains(&ip) || off < lo || off > hi {
            return Err(format!(
                "the provided IP ({ip}) is not in the valid range. The range of valid IPs is {}",
                self.cidr
            ));
        }
        if !self.used_ips.insert(ip) {
            return Err("provided IP is already allocated".into());
        }
        Ok(())
    }

    pub fn allocate_ip(&mut self) -> Option<IpAddr> {
        let (lo, hi) = self.ip_offsets();
        if hi < lo {
            return None;
        }
        let span = hi - lo + 1;
        let base = ip_to_u128(self.cidr.network());
        // Bounded scan: a range larger than what is in use always has a free slot within
        // `used + 1` steps.
        let tries = span.min(self.used_ips.len() as u128 + 1);
        for _ in 0..tries {
            let off = lo + (self.next_ip.saturating_sub(lo)) % span;
            self.next_ip = off + 1;
            if let Some(ip) = u128_to_ip(&self.cidr, base + off)
                && self.used_ips.insert(ip)
            {
                return Some(ip);
            }
        }
        None
    }

    pub fn release_ip(&mut self, ip: IpAddr) {
        self.used_ips.remove(&ip);
    }

    pub fn reserve_port(&mut self, port: u16) -> Result<(), String> {
        if !self.ports.contains(&port) {
            return Err(format!(
                "provided port is not in the valid range. The range of valid ports is {}-{}",
                self.ports.start(),
                self.ports.end()
            ));
        }
        if !self.used_ports.insert(port) {
            return Err("provided port is already allocated".into());
        }
        Ok(())
    }

    pub fn allocate_port(&mut self) -> Option<u16> {
        let (lo, hi) = (*self.ports.start(), *self.ports.end());
        let span = u32::from(hi - lo) + 1;
        for _ in 0..span {
            let p = self.next_port;
            self.next_port = if p >= hi { lo } else { p + 1 };
            if self.used_ports.insert(p) {
                return Some(p);
            }
        }
        None
    }

    pub fn release_port(&mut self, port: u16) {
        self.used_ports.remove(&port);
    }

    pub fn port_in_use(&self, port: u16) -> bool {
        self.used_ports.contains(&port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ips_skip_network_and_broadcast() {
        let mut a = Allocators::new("10.0.0.0/30".parse().unwrap(), 30000..=30001);
        let got: Vec<_> = std::iter::from_fn(|| a.allocate_ip()).collect();
        assert_eq!(
            got,
            vec!["10.0.0.1".parse::<IpAddr>().unwrap(), "10.0.0.2".parse().unwrap()]
        );
        assert!(
            a.reserve_ip("10.0.0.3".parse().unwrap())
                .unwrap_err()
                .contains("not in the valid range")
        );
        a.release_ip("10.0.0.1".parse().unwrap());
        assert!(a.reserve_ip("10.0.0.1".parse().unwrap()).is_ok());
        assert_eq!(
            a.reserve_ip("10.0.0.1".parse().unwrap()).unwrap_err(),
            "provided IP is already allocated"
        );
    }

    #[test]
    fn ports_are_unique_and_ranged() {
        let mut a = Allocators::new("10.0.0.0/24".parse().unwrap(), 30000..=30002);
        assert!(a.reserve_port(30001).is_ok());
        let got: Vec<_> = std::iter::from_fn(|| a.allocate_port()).collect();
        assert_eq!(got, vec![30000, 30002]);
        assert!(a.reserve_port(80).unwrap_err().contains("30000-30002"));
        assert_eq!(
            a.reserve_port(30000).unwrap_err(),
            "provided port is already allocated"
        );
    }
}
