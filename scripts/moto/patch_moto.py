"""Fixes in moto's server that the AWS provider's tests need, applied after installation.

moto 5.0.28's Classic ELB attribute templates render Python booleans (`False`, `True`); AWS
answers `false`/`true`, and the AWS SDKs refuse anything else, so DescribeLoadBalancerAttributes
and ModifyLoadBalancerAttributes fail against moto. The fix renders them as AWS does. Idempotent.
"""

import pathlib
import sys

import moto.elb.responses as responses

path = pathlib.Path(responses.__file__)
text = path.read_text()
fixes = {
    '{{ attributes["access_log"]["enabled"] }}': '{{ attributes["access_log"]["enabled"]|string|lower }}',
    '{{ attributes.cross_zone_load_balancing.enabled }}': "{{ attributes.cross_zone_load_balancing.enabled|string|lower }}",
    '{{ attributes["connection_draining"]["enabled"] }}': '{{ attributes["connection_draining"]["enabled"]|string|lower }}',
    "{{ attributes[\"access_log\"][\"enabled\"] == 'true' }}": "{{ (attributes[\"access_log\"][\"enabled\"]|string|lower == 'true')|string|lower }}",
}
patched = text
for old, new in fixes.items():
    patched = patched.replace(old, new)
if patched != text:
    path.write_text(patched)
    print(f"patched {path}: Classic ELB attribute booleans as AWS writes them")
elif all(new in text for new in fixes.values()):
    print(f"{path} already patched")
else:
    sys.exit(f"{path}: the templates to fix were not found; check scripts/moto/patch_moto.py against this moto")

# moto 5.0.28's RevokeSecurityGroupIngress picks the first rule with the same ports and compares
# whole rules, so revoking one source of a rule that has several often removes nothing (or
# answers InvalidPermission.NotFound). AWS removes exactly the sources asked for; so does this.
import moto.ec2.models.security_groups as security_groups  # noqa: E402

sg_path = pathlib.Path(security_groups.__file__)
sg_text = sg_path.read_text()
start = sg_text.index("    def revoke_security_group_ingress(")
end = sg_text.index("    def authorize_security_group_egress(")
revoke = '''    def revoke_security_group_ingress(
        self,
        group_name_or_id: str,
        ip_protocol: str,
        from_port: str,
        to_port: str,
        ip_ranges: List[Any],
        source_groups: Optional[List[Dict[str, Any]]] = None,
        prefix_list_ids: Optional[List[Dict[str, str]]] = None,
        security_rule_ids: Optional[List[str]] = None,
        vpc_id: Optional[str] = None,
    ) -> None:
        # patched by ccm scripts/moto/patch_moto.py: remove exactly the sources asked for
        group: SecurityGroup = self.get_security_group_by_name_or_id(
            group_name_or_id, vpc_id
        )  # type: ignore[assignment]
        if group is None:
            raise InvalidSecurityGroupNotFoundError(group_name_or_id)
        if security_rule_ids:
            group.ingress_rules = [
                rule for rule in group.ingress_rules if rule.id not in security_rule_ids
            ]
            return
        _source_groups = self._add_source_group(source_groups, vpc_id)
        wanted = SecurityRule(
            self, ip_protocol, group.group_id, from_port, to_port, ip_ranges,
            _source_groups, prefix_list_ids, is_egress=False,
        )

        def cidr(item: Any) -> Any:
            return (item.get("CidrIp"), item.get("CidrIpv6"))

        def gid(item: Any) -> Any:
            return item.get("GroupId")

        def plid(item: Any) -> Any:
            return item.get("PrefixListId")

        todo = [("ip", cidr(i)) for i in ip_ranges or []]
        todo += [("sg", gid(i)) for i in _source_groups or []]
        todo += [("pl", plid(i)) for i in prefix_list_ids or []]
        for kind, key in todo:
            found = False
            for rule in group.ingress_rules:
                if rule.ip_protocol != wanted.ip_protocol:
                    continue
                if wanted.ip_protocol != "-1" and (
                    rule.from_port != wanted.from_port or rule.to_port != wanted.to_port
                ):
                    continue
                items, keyf = {
                    "ip": (rule.ip_ranges, cidr),
                    "sg": (rule.source_groups, gid),
                    "pl": (rule.prefix_list_ids, plid),
                }[kind]
                for item in list(items):
                    if keyf(item) == key:
                        items.remove(item)
                        found = True
                        break
                if found:
                    if not rule.ip_ranges and not rule.source_groups and not rule.prefix_list_ids:
                        group.ingress_rules.remove(rule)
                    break
            if not found:
                raise InvalidPermissionNotFoundError()
        self.sg_old_ingress_ruls[group.id] = group.ingress_rules.copy()

'''
if "patched by ccm scripts/moto/patch_moto.py" not in sg_text[start:end]:
    sg_path.write_text(sg_text[:start] + revoke + sg_text[end:])
    print(f"patched {sg_path}: RevokeSecurityGroupIngress removes exactly the sources asked for")
else:
    print(f"{sg_path} already patched")

# moto 5.0.28 groups a security group's rules by port for DescribeSecurityGroups on a shallow
# copy, so every describe merges other rules' sources into the first rule for good, corrupting the
# group. AWS's describes change nothing; neither does this.
sg_text = sg_path.read_text()
shallow = {
    "return self._flattened_rules(copy.copy(self.ingress_rules))": "return self._flattened_rules(copy.deepcopy(self.ingress_rules))",
    "return self._flattened_rules(copy.copy(self.egress_rules))": "return self._flattened_rules(copy.deepcopy(self.egress_rules))",
}
fixed = sg_text
for old, new in shallow.items():
    fixed = fixed.replace(old, new)
if fixed != sg_text:
    sg_path.write_text(fixed)
    print(f"patched {sg_path}: DescribeSecurityGroups leaves the rules as they are")
elif not all(new in sg_text for new in shallow.values()):
    sys.exit(f"{sg_path}: the describe to fix was not found; check scripts/moto/patch_moto.py against this moto")
