//! Security group rules as sets, and the changes that bring a group's rules where they should
//! be: the exact ingress of a Classic ELB's own group, the nodes' rule from it, and the NLB
//! client, health and MTU rules on the nodes' groups. Pure functions only.
//!
//! A rule is one protocol, one port range and one source, as EC2 compares them: the description
//! is not part of a rule's identity (two rules differing only in their descriptions are one rule
//! to EC2), but it says who a rule belongs to.

use std::collections::{BTreeMap, BTreeSet};

use ipnet::IpNet;

/// Description prefix of the NLB client rules on the nodes' groups (upstream's).
pub const NLB_CLIENT: &str = "kubernetes.io/rule/nlb/client";
/// Description prefix of the NLB health-check rules.
pub const NLB_HEALTH: &str = "kubernetes.io/rule/nlb/health";
/// Description of the NLB path-MTU rules.
pub const NLB_MTU: &str = "kubernetes.io/rule/nlb/mtu";

/// Where a rule admits traffic from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// An IPv4 CIDR.
    Ipv4(String),
    /// An IPv6 CIDR.
    Ipv6(String),
    /// Another security group.
    Group(String),
    /// A managed prefix list.
    PrefixList(String),
}

impl Source {
    /// The source of a CIDR.
    pub fn cidr(net: &IpNet) -> Self {
        match net {
            IpNet::V4(n) => Self::Ipv4(n.to_string()),
            IpNet::V6(n) => Self::Ipv6(n.to_string()),
        }
    }
}

/// One ingress rule, as EC2 identifies it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rule {
    /// `tcp`, `udp`, `icmp`, `icmpv6` or `-1` (all traffic).
    pub protocol: String,
    /// First port (ICMP: the type); 0 for all traffic.
    pub from_port: i32,
    /// Last port (ICMP: the code); 0 for all traffic.
    pub to_port: i32,
    /// Source.
    pub source: Source,
}

impl Rule {
    /// A single-port rule.
    pub fn port(protocol: &str, port: u16, source: Source) -> Self {
        Self {
            protocol: protocol.to_owned(),
            from_port: i32::from(port),
            to_port: i32::from(port),
            source,
        }
    }

    /// All traffic from a security group (the node rule of a Classic ELB).
    pub fn all_from_group(group: &str) -> Self {
        Self {
            protocol: "-1".into(),
            from_port: 0,
            to_port: 0,
            source: Source::Group(group.to_owned()),
        }
    }

    /// ICMP "fragmentation needed" (type 3 code 4) from a CIDR, for path-MTU discovery; its IPv6
    /// counterpart is ICMPv6 "packet too big" (type 2 code 0).
    pub fn path_mtu(net: &IpNet) -> Self {
        match net {
            IpNet::V4(_) => Self {
                protocol: "icmp".into(),
                from_port: 3,
                to_port: 4,
                source: Source::cidr(net),
            },
            IpNet::V6(_) => Self {
                protocol: "icmpv6".into(),
                from_port: 2,
                to_port: 0,
                source: Source::cidr(net),
            },
        }
    }

    /// EC2's spelling of a rule as this module's: protocol numbers as names, all-traffic ports
    /// as 0.
    pub fn normalized(protocol: &str, from: Option<i32>, to: Option<i32>, source: Source) -> Self {
        let protocol = match protocol.to_ascii_lowercase().as_str() {
            "6" => "tcp".to_owned(),
            "17" => "udp".to_owned(),
            "1" => "icmp".to_owned(),
            "58" => "icmpv6".to_owned(),
            "all" | "-1" => "-1".to_owned(),
            other => other.to_owned(),
        };
        let (from_port, to_port) = if protocol == "-1" {
            (0, 0)
        } else {
            (from.unwrap_or(0), to.unwrap_or(0))
        };
        Self {
            protocol,
            from_port,
            to_port,
            source,
        }
    }
}

/// A rule as a group has it, with its description (empty when none).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DescribedRule {
    /// The rule.
    pub rule: Rule,
    /// Its description.
    pub description: String,
}

impl DescribedRule {
    /// A rule with a description.
    pub fn new(rule: Rule, description: impl Into<String>) -> Self {
        Self {
            rule,
            description: description.into(),
        }
    }
}

/// Rules to add to a group and rules to take out of it. Revocations go first, as upstream's.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RuleChanges {
    /// Rules to revoke, as the group has them (descriptions included: EC2 ignores them when
    /// revoking; moto needs them).
    pub revoke: Vec<DescribedRule>,
    /// Rules to authorize, with their descriptions.
    pub authorize: Vec<DescribedRule>,
    /// Rules to keep but hand to another owner: a new description.
    pub relabel: Vec<DescribedRule>,
}

impl RuleChanges {
    /// Nothing to do.
    pub fn is_empty(&self) -> bool {
        self.revoke.is_empty() && self.authorize.is_empty() && self.relabel.is_empty()
    }
}

/// A security group as the planners need it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupView {
    /// Group ID.
    pub id: String,
    /// Group name.
    pub name: String,
    /// VPC.
    pub vpc_id: String,
    /// Tags.
    pub tags: BTreeMap<String, String>,
    /// Ingress rules, one per source (EC2 groups them; they are ungrouped on reading).
    pub ingress: Vec<DescribedRule>,
}

impl GroupView {
    /// Whether the group has `rule` (whatever its description).
    pub fn has(&self, rule: &Rule) -> bool {
        self.ingress.iter().any(|r| &r.rule == rule)
    }
}

/// The changes that make a group's ingress exactly `wanted` (upstream's `setSecurityGroupIngress`,
/// for the Classic ELB's own group): everything else is revoked.
pub fn exact_ingress(wanted: &BTreeSet<Rule>, group: &GroupView) -> RuleChanges {
    let actual: BTreeSet<&Rule> = group.ingress.iter().map(|r| &r.rule).collect();
    RuleChanges {
        revoke: group
            .ingress
            .iter()
            .filter(|r| !wanted.contains(&r.rule))
            .cloned()
            .collect(),
        authorize: wanted
            .iter()
            .filter(|r| !actual.contains(r))
            .map(|r| DescribedRule::new(r.clone(), ""))
            .collect(),
        relabel: Vec::new(),
    }
}

/// Upstream's `findSecurityGroupForInstance`: the one cluster-tagged group of an instance, else
/// its one group if it has a single untagged one; `None` for an instance without groups.
///
/// # Errors
/// Several tagged groups, or several untagged ones and none tagged: upstream cannot tell which
/// is the nodes' group, and neither can this.
pub fn node_group_of(
    instance: &str,
    groups: &[String],
    tagged: &BTreeSet<String>,
) -> Result<Option<String>, String> {
    let (with_tag, without): (Vec<&String>, Vec<&String>) = groups
        .iter()
        .filter(|g| !g.is_empty())
        .partition(|g| tagged.contains(*g));
    match (with_tag.as_slice(), without.as_slice()) {
        ([one], _) => Ok(Some((*one).clone())),
        ([], [one]) => Ok(Some((*one).clone())),
        ([], []) => Ok(None),
        ([], many) => Err(format!(
            "multiple untagged security groups found for instance {instance} ({}); ensure the k8s security group is tagged",
            join(many)
        )),
        (many, _) => Err(format!(
            "multiple tagged security groups found for instance {instance} ({}); ensure only the k8s security group is tagged",
            join(many)
        )),
    }
}

fn join(groups: &[&String]) -> String {
    groups.iter().map(|g| g.as_str()).collect::<Vec<_>>().join(", ")
}

/// The node rules of a Classic ELB (upstream's `updateInstanceSecurityGroupsForLoadBalancer`):
/// all traffic from the load balancer's group into each of `wanted` (the backends' groups), and
/// out of every other group that has it, when that group is the cluster's or the load balancer's
/// group is being deleted (a group still referenced cannot be deleted).
///
/// `shared_elb_group`: the rule admits a group every Classic ELB shares (`ElbSecurityGroup`), so
/// it is never revoked: another Service still needs it (upstream revokes it and takes every other
/// ELB down, kubernetes/kubernetes#62793).
pub fn classic_node_rules(
    lb_group: &str,
    wanted: &BTreeSet<String>,
    groups: &[(GroupView, bool)],
    deleting: bool,
    shared_elb_group: bool,
) -> BTreeMap<String, RuleChanges> {
    let rule = Rule::all_from_group(lb_group);
    let mut out: BTreeMap<String, RuleChanges> = BTreeMap::new();
    for (group, cluster_tagged) in groups {
        let present = group.ingress.iter().find(|r| r.rule == rule);
        let want = wanted.contains(&group.id) && !deleting;
        match present {
            None if want => out
                .entry(group.id.clone())
                .or_default()
                .authorize
                .push(DescribedRule::new(rule.clone(), "")),
            Some(r) if !want && (*cluster_tagged || deleting) && !shared_elb_group => {
                out.entry(group.id.clone()).or_default().revoke.push(r.clone());
            }
            _ => {}
        }
    }
    out
}

/// What an NLB needs on its nodes' groups (upstream's `updateInstanceSecurityGroupsForNLB`
/// inputs).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NlbNeeds {
    /// Node ports clients reach, by protocol (`tcp`, `udp`).
    pub client_ports: BTreeMap<String, BTreeSet<u16>>,
    /// Ports the health checks reach (TCP).
    pub health_ports: BTreeSet<u16>,
    /// The Service's source ranges.
    pub client_cidrs: Vec<IpNet>,
    /// The CIDRs of the load balancer's subnets (health checks come from there).
    pub health_cidrs: Vec<IpNet>,
}

impl NlbNeeds {
    /// The health rules are a subset of the client rules (upstream's skip): clients are the
    /// whole IPv4 world over TCP only, on exactly the health-checked ports.
    fn health_covered_by_clients(&self) -> bool {
        let world = IpNet::V4(ipnet::Ipv4Net::default());
        self.client_cidrs == [world]
            && self.client_ports.keys().all(|p| p == "tcp")
            && self
                .client_ports
                .get("tcp")
                .is_some_and(|ports| *ports == self.health_ports)
    }

    /// The rules and descriptions this NLB wants on a node group.
    pub fn rules(&self, lb_name: &str) -> BTreeMap<Rule, String> {
        let mut out = BTreeMap::new();
        if !self.health_covered_by_clients() {
            let desc = format!("{NLB_HEALTH}={lb_name}");
            for port in &self.health_ports {
                for cidr in &self.health_cidrs {
                    out.insert(Rule::port("tcp", *port, Source::cidr(cidr)), desc.clone());
                }
            }
        }
        let desc = format!("{NLB_CLIENT}={lb_name}");
        for (protocol, ports) in &self.client_ports {
            for port in ports {
                for cidr in &self.client_cidrs {
                    out.insert(Rule::port(protocol, *port, Source::cidr(cidr)), desc.clone());
                }
            }
        }
        out
    }
}

/// The changes to one node group for one NLB: its client and health rules made exactly `needs`
/// (`None`: the group is not a backend's any more, or the NLB is going), touching only rules
/// that carry this NLB's descriptions; then, if the group changed, the shared MTU rules
/// recomputed from every client rule the group ends up with.
///
/// `others`: rules of this NLB another load balancer also needs (EC2 keeps one rule for both,
/// with the first one's description). Instead of being revoked they are handed over (relabelled)
/// to that load balancer, so the last one to need a rule is the one that revokes it.
pub fn nlb_node_rules(
    lb_name: &str,
    needs: Option<&NlbNeeds>,
    group: &GroupView,
    others: &BTreeMap<Rule, String>,
) -> RuleChanges {
    let ours = [
        format!("{NLB_CLIENT}={lb_name}"),
        format!("{NLB_HEALTH}={lb_name}"),
    ];
    let wanted = needs.map(|n| n.rules(lb_name)).unwrap_or_default();
    let mut changes = RuleChanges::default();
    for r in &group.ingress {
        if ours.contains(&r.description) && !wanted.contains_key(&r.rule) {
            match others.get(&r.rule) {
                Some(other) => {
                    let kind = r.description.split_once('=').map_or("", |(kind, _)| kind);
                    changes
                        .relabel
                        .push(DescribedRule::new(r.rule.clone(), format!("{kind}={other}")));
                }
                None => changes.revoke.push(r.clone()),
            }
        }
    }
    for (rule, desc) in &wanted {
        if !group.has(rule) {
            changes
                .authorize
                .push(DescribedRule::new(rule.clone(), desc.clone()));
        }
    }
    if changes.revoke.is_empty() && changes.authorize.is_empty() {
        return changes;
    }
    // The group after these changes, for the MTU rules.
    let mut after: Vec<DescribedRule> = group
        .ingress
        .iter()
        .filter(|r| !changes.revoke.contains(r))
        .cloned()
        .collect();
    after.extend(changes.authorize.iter().cloned());
    let mtu_wanted: BTreeSet<Rule> = after
        .iter()
        .filter(|r| r.description.contains(NLB_CLIENT))
        .filter_map(|r| match &r.rule.source {
            Source::Ipv4(c) | Source::Ipv6(c) => c.parse::<IpNet>().ok().map(|n| Rule::path_mtu(&n)),
            _ => None,
        })
        .collect();
    for r in &group.ingress {
        if r.description == NLB_MTU && !mtu_wanted.contains(&r.rule) {
            changes.revoke.push(r.clone());
        }
    }
    for rule in mtu_wanted {
        if !group.has(&rule) {
            changes.authorize.push(DescribedRule::new(rule, NLB_MTU));
        }
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    fn v4(cidr: &str) -> Source {
        Source::Ipv4(cidr.into())
    }

    fn group(id: &str, rules: &[(Rule, &str)]) -> GroupView {
        GroupView {
            id: id.into(),
            ingress: rules
                .iter()
                .map(|(r, d)| DescribedRule::new(r.clone(), *d))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn exact_ingress_revokes_everything_else() {
        let wanted: BTreeSet<Rule> = [
            Rule::port("tcp", 80, v4("0.0.0.0/0")),
            Rule::path_mtu(&net("0.0.0.0/0")),
        ]
        .into();
        let g = group(
            "sg-elb",
            &[
                (Rule::port("tcp", 80, v4("0.0.0.0/0")), "described by hand"),
                (Rule::port("tcp", 22, v4("0.0.0.0/0")), ""),
            ],
        );
        let changes = exact_ingress(&wanted, &g);
        assert_eq!(
            changes.revoke,
            vec![DescribedRule::new(Rule::port("tcp", 22, v4("0.0.0.0/0")), "")]
        );
        assert_eq!(
            changes.authorize,
            vec![DescribedRule::new(Rule::path_mtu(&net("0.0.0.0/0")), "")]
        );
        let done = group(
            "sg-elb",
            &[
                (Rule::port("tcp", 80, v4("0.0.0.0/0")), ""),
                (Rule::path_mtu(&net("0.0.0.0/0")), ""),
            ],
        );
        assert!(exact_ingress(&wanted, &done).is_empty());
    }

    #[test]
    fn rules_normalize_as_ec2_spells_them() {
        let all = Rule::normalized("-1", Some(-1), Some(-1), Source::Group("sg-1".into()));
        assert_eq!(all, Rule::all_from_group("sg-1"));
        assert_eq!(
            Rule::normalized("6", Some(80), Some(80), v4("1.2.3.4/32")),
            Rule::port("tcp", 80, v4("1.2.3.4/32"))
        );
        assert_eq!(Rule::path_mtu(&net("::/0")).protocol, "icmpv6");
    }

    #[test]
    fn the_node_group_of_an_instance_is_upstreams() {
        // Upstream's TestFindSecurityGroupForInstance(MultipleTagged) rows.
        let tagged: BTreeSet<String> = ["sg-tagged".to_owned(), "sg-tagged2".to_owned()].into();
        let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            node_group_of("i-1", &s(&["sg-1"]), &tagged),
            Ok(Some("sg-1".into()))
        );
        assert_eq!(
            node_group_of("i-1", &s(&["sg-1", "sg-tagged"]), &tagged),
            Ok(Some("sg-tagged".into()))
        );
        assert_eq!(node_group_of("i-1", &[], &tagged), Ok(None));
        let many_untagged = node_group_of("i-1", &s(&["sg-1", "sg-2"]), &tagged).unwrap_err();
        assert!(many_untagged.contains("multiple untagged"), "{many_untagged}");
        let many_tagged = node_group_of("i-1", &s(&["sg-tagged", "sg-tagged2"]), &tagged).unwrap_err();
        assert!(many_tagged.contains("multiple tagged"), "{many_tagged}");
    }

    #[test]
    fn classic_node_rules_follow_the_backends() {
        let rule = Rule::all_from_group("sg-elb");
        let groups = vec![
            (group("sg-wanted", &[]), true),
            (group("sg-done", &[(rule.clone(), "")]), true),
            (group("sg-stale-tagged", &[(rule.clone(), "")]), true),
            (group("sg-stale-untagged", &[(rule.clone(), "")]), false),
        ];
        let wanted: BTreeSet<String> = ["sg-wanted".to_owned(), "sg-done".to_owned()].into();
        let changes = classic_node_rules("sg-elb", &wanted, &groups, false, false);
        assert_eq!(changes.len(), 2, "{changes:?}");
        assert_eq!(
            changes["sg-wanted"].authorize,
            vec![DescribedRule::new(rule.clone(), "")]
        );
        assert_eq!(
            changes["sg-stale-tagged"].revoke,
            vec![DescribedRule::new(rule.clone(), "")]
        );
        // Deleting the load balancer's group: out of every group, tagged or not.
        let deleting = classic_node_rules("sg-elb", &BTreeSet::new(), &groups, true, false);
        let revoked: Vec<&String> = deleting.keys().collect();
        assert_eq!(revoked, vec!["sg-done", "sg-stale-tagged", "sg-stale-untagged"]);
        // A group all Classic ELBs share is never revoked (kubernetes/kubernetes#62793).
        assert!(classic_node_rules("sg-elb", &BTreeSet::new(), &groups, true, true).is_empty());
    }

    fn needs(client: &[(&str, u16)], health: &[u16], clients: &[&str], subnets: &[&str]) -> NlbNeeds {
        let mut client_ports: BTreeMap<String, BTreeSet<u16>> = BTreeMap::new();
        for (p, port) in client {
            client_ports.entry((*p).to_owned()).or_default().insert(*port);
        }
        NlbNeeds {
            client_ports,
            health_ports: health.iter().copied().collect(),
            client_cidrs: clients.iter().map(|c| net(c)).collect(),
            health_cidrs: subnets.iter().map(|c| net(c)).collect(),
        }
    }

    #[test]
    fn nlb_rules_skip_health_when_clients_cover_it() {
        let open = needs(&[("tcp", 30080)], &[30080], &["0.0.0.0/0"], &["10.0.1.0/24"]);
        let rules = open.rules("lb");
        assert_eq!(rules.len(), 1);
        assert_eq!(
            rules[&Rule::port("tcp", 30080, v4("0.0.0.0/0"))],
            "kubernetes.io/rule/nlb/client=lb"
        );
        // Local: the health check node port differs, so health rules per subnet CIDR.
        let local = needs(
            &[("tcp", 30080)],
            &[31000],
            &["0.0.0.0/0"],
            &["10.0.1.0/24", "10.0.2.0/24"],
        );
        assert_eq!(local.rules("lb").len(), 3);
        // Source ranges: health rules too.
        let ranged = needs(&[("tcp", 30080)], &[30080], &["1.2.3.0/24"], &["10.0.1.0/24"]);
        let rules = ranged.rules("lb");
        assert_eq!(
            rules[&Rule::port("tcp", 30080, v4("10.0.1.0/24"))],
            "kubernetes.io/rule/nlb/health=lb"
        );
        assert_eq!(
            rules[&Rule::port("tcp", 30080, v4("1.2.3.0/24"))],
            "kubernetes.io/rule/nlb/client=lb"
        );
        // UDP clients: health rules (TCP) needed.
        let udp = needs(&[("udp", 30053)], &[30053], &["0.0.0.0/0"], &["10.0.1.0/24"]);
        assert_eq!(udp.rules("lb").len(), 2);
    }

    #[test]
    fn nlb_rules_converge_only_their_own_descriptions_and_the_mtu_rules() {
        let want = needs(&[("tcp", 30080)], &[30080], &["1.2.3.0/24"], &["10.0.1.0/24"]);
        let client = Rule::port("tcp", 30080, v4("1.2.3.0/24"));
        let health = Rule::port("tcp", 30080, v4("10.0.1.0/24"));
        let mtu = Rule::path_mtu(&net("1.2.3.0/24"));
        let stale = Rule::port("tcp", 30999, v4("1.2.3.0/24"));
        let foreign = Rule::port("tcp", 22, v4("0.0.0.0/0"));
        let g = group(
            "sg-node",
            &[
                (stale.clone(), "kubernetes.io/rule/nlb/client=lb"),
                (foreign.clone(), "ssh"),
                (health.clone(), "kubernetes.io/rule/nlb/health=other"),
            ],
        );
        let changes = nlb_node_rules("lb", Some(&want), &g, &BTreeMap::new());
        assert_eq!(
            changes.revoke,
            vec![DescribedRule::new(
                stale.clone(),
                "kubernetes.io/rule/nlb/client=lb"
            )]
        );
        assert_eq!(
            changes.authorize,
            vec![
                DescribedRule::new(client.clone(), "kubernetes.io/rule/nlb/client=lb"),
                DescribedRule::new(mtu.clone(), NLB_MTU),
            ]
        );
        // Converged: nothing to do, whoever's description the shared health rule carries.
        let done = group(
            "sg-node",
            &[
                (client.clone(), "kubernetes.io/rule/nlb/client=lb"),
                (health.clone(), "kubernetes.io/rule/nlb/health=other"),
                (mtu.clone(), NLB_MTU),
                (foreign, "ssh"),
            ],
        );
        assert!(nlb_node_rules("lb", Some(&want), &done, &BTreeMap::new()).is_empty());
        // Going: its client rule and the MTU rule it alone implied go; the other's rule stays.
        let gone = nlb_node_rules("lb", None, &done, &BTreeMap::new());
        assert_eq!(
            gone.revoke,
            vec![
                DescribedRule::new(client, "kubernetes.io/rule/nlb/client=lb"),
                DescribedRule::new(mtu, NLB_MTU)
            ]
        );
        assert!(gone.authorize.is_empty());
    }

    #[test]
    fn a_rule_another_nlb_needs_is_handed_over_not_revoked() {
        let shared = Rule::port("tcp", 10256, v4("10.0.1.0/24"));
        let g = group(
            "sg-node",
            &[(shared.clone(), "kubernetes.io/rule/nlb/health=first")],
        );
        let others: BTreeMap<Rule, String> = [(shared.clone(), "second".to_owned())].into();
        let changes = nlb_node_rules("first", None, &g, &others);
        assert!(changes.revoke.is_empty(), "{changes:?}");
        assert_eq!(
            changes.relabel,
            vec![DescribedRule::new(
                shared.clone(),
                "kubernetes.io/rule/nlb/health=second"
            )]
        );
        // Upstream's behaviour without the hand-over: revoked, the second NLB loses its checks.
        let alone = nlb_node_rules("first", None, &g, &BTreeMap::new());
        assert_eq!(
            alone.revoke,
            vec![DescribedRule::new(shared, "kubernetes.io/rule/nlb/health=first")]
        );
    }
}
