"""The showcase records (history, nested trees, locks, damaged records, leftovers ...): a mixin of the world builder."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from demo.accounts import (
    CDKD_VERSION,
    DAY_MS,
    HOUR_MS,
    MINUTE_MS,
    NDJSON_TYPE,
    PLATFORM_EU,
    PRODUCTION,
    SEED,
    STAGING,
    DemoAccountSpec,
)
from demo.formats import _sha256, _suffix, _uuid, cdkd_json, cdkd_jsonl, iso
from demo.kinds import build_analytics, build_api, build_data, build_events, export_alias
from demo.records import StackBuilder, _Put
from demo.runs import RunRecorder, run_index


class Showcase:
    """The named records each account shows off; mixed into `demo.world._World`."""

    def production(self) -> None:
        spec = PRODUCTION
        plan = self.plans[spec.account_id]
        rng = random.Random(f"{SEED}:prod:extras")
        self.history_record(spec)
        self.nested_tree(spec, "Prod-Checkout", "us-east-1")
        self.big_stack(spec, "Prod-EventRouting", "us-east-1")
        self.v11_showcase(spec, "Prod-PaymentsGateway", "us-east-1")
        self.newer_version(spec, "Prod-FeatureFlags", "us-west-2")
        self.dns_stack(spec, "Prod-PublicDns", "us-east-1")

        # Legacy v1 records: one names its region in the body, one does not.
        b = StackBuilder(spec, "LegacyMonolith", "us-east-1", version=1)
        build_api(b, "Monolith", None, None)
        record = b.state(self.now - 700 * DAY_MS)
        key = plan.put_state(record, b.stack, None)
        self.note("legacy_v1_with_region", spec, b.stack, None, key, "v1 legacy key, body region us-east-1")
        self.versions_seen.setdefault(1, self.interesting["legacy_v1_with_region"])

        b = StackBuilder(spec, "LegacyCron", "us-east-1", version=1)
        b.role("CronJob/ServiceRole", managed=["service-role/AWSLambdaBasicExecutionRole"])
        record = b.state(self.now - 820 * DAY_MS)
        del record["region"]  # pre-v2 writers could leave it out; it then matches any region
        key = plan.put_state(record, b.stack, None)
        self.note("legacy_v1_no_region", spec, b.stack, None, key, "v1 legacy key, no region in the body")

        # Locks: a live deploy, an expired one left by a crashed run.
        self.lock(
            spec,
            "Prod-InventoryData",
            None,
            rng,
            "live_lock",
            owner="github-actions@runner-prod-3:2817",
            age_min=6,
            ttl_min=30,
        )
        self.lock(
            spec,
            "Prod-SearchApi",
            None,
            rng,
            "expired_lock",
            owner="maria@mbp-maria.local:51734",
            age_min=26 * 60,
            ttl_min=30,
            operation="destroy",
        )

        # A destroyed stack: its event history outlives its record.
        runs = []
        start = self.now - 12 * DAY_MS
        r = RunRecorder("Prod-LegacyReports", "us-west-2", "deploy", start, rng, "0.284.40")
        r.resource(
            "CREATE",
            "ReportsBucketB1E4F8A2",
            "AWS::S3::Bucket",
            "prod-legacyreports-reportsbucketb1e4f8a2-8xq2ml0pzt7r",
        )
        r.resource(
            "CREATE",
            "ReportsFunction9D3C7E21",
            "AWS::Lambda::Function",
            "Prod-LegacyReports-ReportsFunction9D3C7E21-Kq8ZpLm2Xw4N",
        )
        r.finish()
        runs.append(r)
        r = RunRecorder("Prod-LegacyReports", "us-west-2", "destroy", self.now - 2 * DAY_MS, rng)
        r.resource(
            "DELETE",
            "ReportsFunction9D3C7E21",
            "AWS::Lambda::Function",
            "Prod-LegacyReports-ReportsFunction9D3C7E21-Kq8ZpLm2Xw4N",
        )
        r.resource(
            "DELETE",
            "ReportsBucketB1E4F8A2",
            "AWS::S3::Bucket",
            "prod-legacyreports-reportsbucketb1e4f8a2-8xq2ml0pzt7r",
            outcome="retain",
        )
        r.finish()
        runs.append(r)
        self.write_runs(spec, "Prod-LegacyReports", "us-west-2", runs)
        self.note(
            "destroyed_with_events",
            spec,
            "Prod-LegacyReports",
            "us-west-2",
            plan.key("Prod-LegacyReports", "us-west-2", "deployments/index.json"),
            "events only, no state.json",
        )

        # A failed deploy left a rollback journal and a create-token ledger beside a record.
        self.failed_deploy_leftovers(spec, "Prod-ShippingFiles", "us-west-2")

        plan.put(
            "cdkd-bootstrap/us-east-1.json",
            cdkd_json(
                {
                    "assetBucket": f"cdkd-assets-{spec.account_id}-us-east-1",
                    "containerRepo": f"cdkd-container-assets-{spec.account_id}-us-east-1",
                    "assetSupportVersion": 1,
                    "createdAt": iso(self.now - 400 * DAY_MS),
                }
            ),
        )

    def staging(self) -> None:
        spec = STAGING
        plan = self.plans[spec.account_id]
        rng = random.Random(f"{SEED}:staging:extras")

        # Damaged records (reference §10.2): each one defect class.
        def broken(stack: str, region: str, mutate: Callable[[dict[str, Any]], None], name: str, note: str) -> None:
            b = StackBuilder(spec, stack, region, version=11)
            build_events(b, stack.split("-", 1)[1])
            record = b.state(self.ago(b.rng, 1, 30))
            mutate(record)
            key = plan.put_state(record, stack, region)
            self.note(name, spec, stack, region, key, note)

        broken(
            "Staging-LegacyImport",
            "us-east-1",
            lambda r: r.__setitem__("resources", []),
            "malformed_resources_list",
            "resources is []",
        )
        broken(
            "Staging-Emails",
            "us-east-1",
            lambda r: r.__setitem__("outputs", "arn:aws:sns:us-east-1:222222222222:emails"),
            "malformed_outputs_string",
            "outputs is a string",
        )

        def no_type(r: dict[str, Any]) -> None:
            row = next(iter(r["resources"].values()))
            del row["resourceType"]

        broken("Staging-Thumbnails", "us-east-2", no_type, "malformed_row_no_type", "a row without resourceType")

        def null_props(r: dict[str, Any]) -> None:
            rows = list(r["resources"].values())
            rows[-1]["properties"] = None

        broken("Staging-Digests", "us-east-1", null_props, "malformed_properties_null", "a row with properties: null")

        def bad_orphans(r: dict[str, Any]) -> None:
            r["orphans"] = {
                "LegacyQueue4A7E3555": {"physicalId": "https://sqs.us-east-1.amazonaws.com/222222222222/legacy"}
            }
            r["lastModified"] = r.pop("lastModified")

        broken("Staging-Fanout", "us-east-1", bad_orphans, "malformed_orphans", "orphans is an object, not a list")

        # A body that is not JSON: an upload cut off half way.
        b = StackBuilder(spec, "Staging-Truncated", "us-east-1", version=11)
        build_data(b, "Truncated")
        body = cdkd_json(b.state(self.now - 3 * DAY_MS))
        key = plan.put_state(body[: len(body) * 2 // 5], "Staging-Truncated", "us-east-1")
        self.note("malformed_not_json", spec, "Staging-Truncated", "us-east-1", key, "body is not JSON")

        # The key says us-east-1, the body says us-west-2 (a hand copy between regions).
        b = StackBuilder(spec, "Staging-CopiedQueues", "us-east-1", version=9)
        build_events(b, "CopiedQueues")
        record = b.state(self.now - 9 * DAY_MS)
        record["region"] = "us-west-2"
        key = plan.put_state(record, b.stack, "us-east-1")
        self.note("region_mismatch", spec, b.stack, "us-east-1", key, "body region us-west-2 under a us-east-1 key")

        # Another legacy record, under the legacy bucket (v1 stays v1 until its next deploy).
        b = StackBuilder(spec, "Staging-Sandbox", "us-east-1", version=1)
        b.queue("SandboxQueue")
        b.topic("SandboxTopic")
        key = plan.put_state(b.state(self.now - 500 * DAY_MS), b.stack, None)
        self.note("legacy_v1_staging", spec, b.stack, None, key, "v1 record in the legacy-named bucket")

        # Locks in every damaged form.
        self.lock(
            spec,
            "Staging-PaymentsApi",
            None,
            rng,
            "lock_bad_expiry",
            owner="deploy-bot@ci-staging:900",
            age_min=40,
            ttl_min=30,
            expires="2026-11-29T13:00:00Z",
        )
        truncated = cdkd_json(
            {
                "owner": "sam@ws-sam:4121",
                "timestamp": self.now - 15 * MINUTE_MS,
                "expiresAt": self.now + 15 * MINUTE_MS,
                "operation": "scrub",
            }
        )
        self.lock(spec, "Staging-CatalogData", None, rng, "lock_unreadable", raw=truncated[:47])

        # A first deploy in progress: a live lock and a run started, no state.json yet.
        self.lock(
            spec,
            "Staging-SearchIndexer",
            "us-east-1",
            rng,
            "lock_without_state",
            owner="github-actions@runner-stg-1:3310",
            age_min=2,
            ttl_min=30,
        )
        r = RunRecorder("Staging-SearchIndexer", "us-east-1", "deploy", self.now - 2 * MINUTE_MS, rng)
        r.events.append(
            {
                "timestamp": iso(r._tick()),
                "eventType": "RESOURCE_STARTED",
                "stackName": r.stack,
                "operation": "CREATE",
                "logicalId": "IndexerRoleA1B2C3D4",
                "resourceType": "AWS::IAM::Role",
                "provisionedBy": "sdk",
            }
        )
        # No index.json yet: cdkd writes it only when the run finalizes.
        plan.put(plan.key(r.stack, "us-east-1", f"deployments/{r.run_id}.jsonl"), cdkd_jsonl(r.events), NDJSON_TYPE)

        # A destroy that could not address a resource: FAILED with a RESOURCE_SKIPPED, record kept.
        self.skipped_destroy(spec, "Staging-ImageResizer", "us-east-2")

    def platform(self) -> None:
        spec = PLATFORM_EU
        plan = self.plans[spec.account_id]
        rng = random.Random(f"{SEED}:platform:extras")
        self.nested_tree(spec, "Platform-SharedVpc", "eu-west-1", small=True)
        self.dns_stack(spec, "Platform-Dns", "us-east-1")
        self.lock(
            spec,
            "Platform-ObservabilityData",
            None,
            rng,
            "platform_live_lock",
            owner="platform-ci@build-eu-2:7781",
            age_min=1,
            ttl_min=30,
            operation="deploy",
        )
        b = StackBuilder(spec, "Platform-BreakGlass", "eu-west-1", version=1)
        b.role("BreakGlassRole", service="ec2.amazonaws.com", managed=["AdministratorAccess"])
        key = plan.put_state(b.state(self.now - 600 * DAY_MS), b.stack, None)
        self.note("legacy_v1_platform", spec, b.stack, None, key, "v1 record under a custom prefix")
        plan.put(
            "cdkd-bootstrap/eu-west-1.json",
            cdkd_json(
                {
                    "assetBucket": f"cdkd-assets-{spec.account_id}-eu-west-1",
                    "containerRepo": f"cdkd-container-assets-{spec.account_id}-eu-west-1",
                    "assetSupportVersion": 1,
                    "createdAt": iso(self.now - 300 * DAY_MS),
                }
            ),
        )

    # -- pieces ---------------------------------------------------------------------------

    def lock(
        self,
        spec: DemoAccountSpec,
        stack: str,
        region: str | None,
        rng: random.Random,
        name: str,
        *,
        owner: str = "",
        age_min: int = 0,
        ttl_min: int = 30,
        operation: str = "deploy",
        expires: Any = None,
        raw: bytes | None = None,
    ) -> str:
        """A lock.json beside a stack's record, in cdkd's exact shape and order."""
        plan = self.plans[spec.account_id]
        if region is None:
            # Beside an existing healthy record: find the region it was written to.
            region = next(
                p.key.split("/")[-2]
                for p in plan.puts
                if p.key.startswith(f"{spec.prefix}/{stack}/") and p.key.endswith("/state.json")
            )
        key = plan.key(stack, region, "lock.json")
        if raw is None:
            ts = self.now - age_min * MINUTE_MS - rng.randint(0, 59_999)
            raw = cdkd_json(
                {
                    "owner": owner,
                    "timestamp": ts,
                    "expiresAt": expires if expires is not None else ts + ttl_min * MINUTE_MS,
                    "operation": operation,
                }
            )
        plan.put(key, raw)
        self.note(name, spec, stack, region, key)
        return key

    def write_runs(self, spec: DemoAccountSpec, stack: str, region: str, runs: list[RunRecorder]) -> None:
        plan = self.plans[spec.account_id]
        for r in runs:
            plan.put(plan.key(stack, region, f"deployments/{r.run_id}.jsonl"), cdkd_jsonl(r.events), NDJSON_TYPE)
        plan.put(plan.key(stack, region, "deployments/index.json"), cdkd_json(run_index(stack, region, runs)))

    def history_record(self, spec: DemoAccountSpec) -> None:
        """`Prod-OrdersApi`: four S3 versions (resource added, property + output changed,
        resource removed) and the deploy runs that wrote them, plus one failed run."""
        stack, region = "Prod-OrdersApi", "us-east-1"
        plan = self.plans[spec.account_id]
        rng = random.Random(f"{SEED}:history")
        b = StackBuilder(spec, stack, region, version=11)
        build_api(b, "Orders", None, None)
        rows = b.resources
        runs: list[RunRecorder] = []
        t = self.now - 30 * DAY_MS

        r = RunRecorder(stack, region, "deploy", t, rng)
        for lid, row in rows.items():
            r.resource("CREATE", lid, row["resourceType"], row["physicalId"], provisioned_by=row.get("provisionedBy"))
        t = r.finish()
        runs.append(r)
        versions = [b.state(t)]

        # 2: a resource added (an alarm topic).
        t += 9 * DAY_MS
        r = RunRecorder(stack, region, "deploy", t, rng)
        alarm = b.topic("OrdersAlarms", display="Orders alarms")
        b.output("AlarmTopicArn", b.resources[alarm]["physicalId"])
        r.resource("CREATE", alarm, "AWS::SNS::Topic", b.resources[alarm]["physicalId"])
        t = r.finish()
        runs.append(r)
        versions.append(b.state(t))

        # A failed deploy in between: the record is unchanged.
        t += 2 * DAY_MS
        fn = next(k for k, v in rows.items() if v["resourceType"] == "AWS::Lambda::Function")
        r = RunRecorder(stack, region, "deploy", t, rng)
        r.resource(
            "UPDATE",
            fn,
            "AWS::Lambda::Function",
            rows[fn]["physicalId"],
            outcome="fail",
            error={
                "name": "ProvisioningError",
                "message": f"Failed to update {fn}: Lambda was unable to configure your environment variables "
                "because the environment variables you have provided exceeded the 4KB limit.",
                "awsErrorCode": "InvalidParameterValueException",
                "requestId": _uuid(rng),
            },
        )
        t = r.finish()
        runs.append(r)

        # 3: a property changed (memory, timeout) and an output changed.
        t += 3 * DAY_MS
        r = RunRecorder(stack, region, "deploy", t, rng)
        rows[fn]["properties"]["MemorySize"] = 2048
        rows[fn]["properties"]["Timeout"] = 90
        rows[fn]["observedProperties"]["MemorySize"] = 2048
        rows[fn]["observedProperties"]["Timeout"] = 90
        b.outputs["WorkQueueUrl"] = b.outputs["WorkQueueUrl"].replace(
            "sqs.us-east-1.amazonaws.com", "sqs.us-east-1.api.aws"
        )
        r.resource("UPDATE", fn, "AWS::Lambda::Function", rows[fn]["physicalId"])
        t = r.finish()
        runs.append(r)
        versions.append(b.state(t))

        # 4: a resource removed (the SSM parameter).
        t += 5 * DAY_MS
        r = RunRecorder(stack, region, "deploy", t, rng)
        param = next(k for k, v in rows.items() if v["resourceType"] == "AWS::SSM::Parameter")
        removed = rows.pop(param)
        rows[fn]["properties"]["Environment"]["Variables"].pop("ENDPOINT_PARAM", None)
        for row in rows.values():
            if param in row.get("dependencies", []):
                row["dependencies"].remove(param)
        r.resource("DELETE", param, "AWS::SSM::Parameter", removed["physicalId"])
        t = r.finish()
        runs.append(r)
        versions.append(b.state(t))

        key = plan.key(stack, region, "state.json")
        plan.sequences.append([_Put(key, cdkd_json(v)) for v in versions])
        self.note("history", spec, stack, region, key, "4 S3 versions")
        self.write_runs(spec, stack, region, runs)
        self.note(
            "events_history",
            spec,
            stack,
            region,
            plan.key(stack, region, "deployments/index.json"),
            "5 deploy runs, one FAILED",
        )

    def nested_tree(self, spec: DemoAccountSpec, parent: str, region: str, *, small: bool = False) -> None:
        """A parent with two `AWS::CloudFormation::Stack` rows, their children, and a grandchild."""
        top = StackBuilder(spec, parent, region, version=11)
        domain = parent.split("-", 1)[1]
        if small:
            top.kms_key("FlowLogsKey", alias=f"{parent.lower()}/flow-logs")
            top.bucket("FlowLogs")
        else:
            build_api(top, domain, None, None)
        first = top.nested_stack("Database" if not small else "Subnets")
        second = top.nested_stack("Payments" if not small else "Endpoints")
        children = []
        for lid, kind in ((first, "data"), (second, "api")):
            child = StackBuilder(spec, f"{parent}~{lid}", region, version=11)
            child.parent = (parent, lid)
            if kind == "data":
                build_data(child, "Nested")
                child.export_names.clear()
                child.outputs = {k: v for k, v in child.outputs.items() if ":" not in k}
            else:
                build_events(child, "Nested")
                child.export_names.clear()
                child.outputs = {k: v for k, v in child.outputs.items() if ":" not in k}
                child.extra["conditionVerdicts"] = {
                    "UseCustomerManagedKey": {
                        "verdict": True,
                        "fingerprint": "sha256:" + _sha256(child.stack, "UseCustomerManagedKey"),
                    }
                }
            # The parent row's attributes carry the child's outputs, as Fn::GetAtt sees them.
            top.resources[lid]["attributes"] = {f"Outputs.{k}": v for k, v in child.outputs.items()}
            children.append(child)
        # A grandchild under the second child.
        grand_lid = children[1].nested_stack("Fraud" if not small else "Resolver")
        grand = StackBuilder(spec, f"{children[1].stack}~{grand_lid}", region, version=11)
        grand.parent = (children[1].stack, grand_lid)
        grand.queue("ReviewQueue", fifo=True)
        grand.table("Decisions", sk=None)
        grand.output("ReviewQueueUrl", next(iter(grand.resources.values()))["physicalId"])
        children[1].resources[grand_lid]["attributes"] = {f"Outputs.{k}": v for k, v in grand.outputs.items()}
        top.output("NestedStacksCount", 3)

        tag = "platform_" if small else ""
        # One deploy wrote the whole tree, children first.
        deployed = self.now - 4 * DAY_MS
        key = self.save(top, deployed + 9_000, note="nested parent")
        self.note(f"{tag}nested_parent", spec, parent, region, key)
        for i, child in enumerate(children):
            key = self.save(child, deployed + 5_000 + i * 1_000, note="nested child")
            self.note(f"{tag}nested_child" + ("" if i == 0 else f"_{i + 1}"), spec, child.stack, region, key)
        key = self.save(grand, deployed + 3_000, note="nested grandchild")
        self.note(f"{tag}nested_grandchild", spec, grand.stack, region, key)

        # The parent's deploy run carries the children's events under the children's names.
        rng = random.Random(f"{SEED}:{parent}:events")
        r = RunRecorder(parent, region, "deploy", self.now - 4 * DAY_MS, rng)
        for builder in (top, *children, grand):
            for lid, row in list(builder.resources.items())[:4]:
                r.resource(
                    "CREATE",
                    lid,
                    row["resourceType"],
                    row["physicalId"],
                    provisioned_by=row.get("provisionedBy"),
                    stack=builder.stack,
                )
        r.finish()
        self.write_runs(spec, parent, region, [r])

    def big_stack(self, spec: DemoAccountSpec, stack: str, region: str) -> None:
        """~2,000 resources: a per-tenant event fan-out, as a generated CDK app produces."""
        b = StackBuilder(spec, stack, region, version=11)
        bus_lid = b.lid("RoutingBus")
        bus = b.add(
            bus_lid,
            "AWS::Events::EventBus",
            f"{stack}-routing",
            {"Name": f"{stack}-routing"},
            {"Arn": b.arn("events", f"event-bus/{stack}-routing"), "Name": f"{stack}-routing"},
        )
        topic = b.topic("TenantFanout")
        per_tenant = 5
        tenants = max(1, (self.big_resources - 2) // per_tenant)
        for i in range(tenants):
            t = f"Tenant{i:04d}"
            q = b.queue(f"{t}/Inbox")
            b.subscription(topic, q)
            rule = b.lid(f"{t}/Rule")
            b.add(
                rule,
                "AWS::Events::Rule",
                f"{stack}-routing|" + f"{stack}-{rule}"[:64],
                {
                    "EventBusName": {"Ref": bus},
                    "EventPattern": {"detail": {"tenantId": [t.lower()]}},
                    "Targets": [{"Arn": {"Fn::GetAtt": [q, "Arn"]}, "Id": "Target0"}],
                },
                {"Arn": b.arn("events", f"rule/{stack}-routing/{rule}")},
                deps=[bus, q],
            )
            b.add(
                b.lid(f"{t}/InboxPolicy"),
                "AWS::SQS::QueuePolicy",
                b.resources[q]["physicalId"],
                {
                    "Queues": [{"Ref": q}],
                    "PolicyDocument": {
                        "Version": "2012-10-17",
                        "Statement": [
                            {
                                "Effect": "Allow",
                                "Principal": {"Service": "events.amazonaws.com"},
                                "Action": "sqs:SendMessage",
                                "Resource": {"Fn::GetAtt": [q, "Arn"]},
                                "Condition": {"ArnEquals": {"aws:SourceArn": {"Fn::GetAtt": [rule, "Arn"]}}},
                            }
                        ],
                    },
                },
                deps=[q, rule],
            )
            b.parameter(f"{t}/InboxUrl", f"/prod/routing/{t.lower()}/inbox-url", b.resources[q]["physicalId"])
        b.output("RoutingBusArn", b.resources[bus]["attributes"]["Arn"])
        b.output("TenantCount", tenants)
        key = self.save(b, self.now - 6 * HOUR_MS)
        self.note("big", spec, stack, region, key, f"{len(b.resources)} resources")

    def v11_showcase(self, spec: DemoAccountSpec, stack: str, region: str) -> None:
        """Every v11 and no-bump field: NoEcho masks, orphans, skipped outputs, condition
        verdicts, a refused observed baseline, masked-property fingerprints."""
        b = StackBuilder(spec, stack, region, version=11)
        build_api(b, "Gateway", None, None)
        key_lid = b.kms_key("GatewayKey")
        secret = b.secret("ProviderApiKey", "prod/payments/provider-api-key", kms=key_lid)
        fn = next(k for k, v in b.resources.items() if v["resourceType"] == "AWS::Lambda::Function")
        env = b.resources[fn]["properties"]["Environment"]["Variables"]
        env["PROVIDER_WEBHOOK_SECRET"] = "***"  # a NoEcho parameter supplied it
        env["PROVIDER_API_KEY"] = (
            "{{resolve:secretsmanager:" + b.resources[secret]["physicalId"] + ":SecretString:apiKey::}}"
        )
        b.resources[fn]["observedProperties"]["Environment"] = {"Variables": {**env}}
        b.resources[fn]["noEchoLeaves"] = [["Environment", "Variables", "PROVIDER_WEBHOOK_SECRET"]]
        b.resources[fn]["noEchoExactEchoLeaves"] = [["Environment", "Variables", "PROVIDER_WEBHOOK_SECRET"]]
        b.resources[fn]["maskedPropertyFingerprints"] = {"Environment": "sha256:" + _sha256(stack, fn, "Environment")}
        b.resources[fn]["maskedPropertyInputFingerprints"] = {
            "Environment": "inputs-sha256:"
            + _sha256(stack, fn, "inputs")
            + "+sha256:"
            + _sha256(stack, fn, "Environment")
        }
        # A custom resource whose handler answered NoEcho: attributes masked.
        cr = b.lid("ProviderRegistration")
        b.add(
            cr,
            "Custom::ProviderRegistration",
            f"registration-{_uuid(b.rng)[:13]}",
            {"ServiceToken": b.resources[fn]["attributes"]["Arn"], "MerchantId": "acme-prod-01", "Nonce": "3"},
            {"ClientId": "acme-prod-01-client", "ClientSecret": "***", "WebhookSigningKey": "***"},
            deps=[fn],
            provisioned_by=None,
            noEchoAttributeNames=["ClientSecret", "WebhookSigningKey"],
        )
        b.output("ProviderClientSecret", "***")
        # An imported table whose observed baseline cdkd import declined to capture.
        imported = b.table("LegacyLedger", sk=None)
        row = b.resources[imported]
        row.pop("observedProperties")
        row["observedBaselineRefused"] = True
        row["observedBaselineRefusalReason"] = "unverifiable-parameter"
        b.extra["skippedOutputs"] = {"ProviderDashboardUrl": _sha256(stack, "ProviderDashboardUrl")}
        orphan_q = b.lid("ReconciliationQueue")
        b.extra["orphans"] = [
            {
                "logicalId": orphan_q,
                "orphanedAt": self.now - 5 * DAY_MS,
                "state": {
                    "physicalId": f"https://sqs.{region}.amazonaws.com/{spec.account_id}/{stack}-{orphan_q}-9fKq2LmZp0Xa",
                    "resourceType": "AWS::SQS::Queue",
                    "properties": {"QueueName": f"{stack}-{orphan_q}-9fKq2LmZp0Xa", "VisibilityTimeout": 120},
                    "attributes": {"Arn": b.arn("sqs", f"{stack}-{orphan_q}-9fKq2LmZp0Xa")},
                    "deletionPolicy": "Retain",
                    "provisionedBy": "sdk",
                },
            }
        ]
        b.extra["conditionVerdicts"] = {
            "HasProviderSandbox": {"verdict": False, "fingerprint": "sha256:" + _sha256(stack, "HasProviderSandbox")}
        }
        key = self.save(b, self.now - 3 * HOUR_MS)
        self.note("v11_showcase", spec, stack, region, key, "NoEcho masks, orphans, skippedOutputs, conditionVerdicts")

    def newer_version(self, spec: DemoAccountSpec, stack: str, region: str) -> None:
        b = StackBuilder(spec, stack, region, version=11)
        build_events(b, "FeatureFlags")
        record = b.state(self.now - 1 * DAY_MS)
        record["version"] = 12  # written by a cdkd newer than this app knows
        record["resourceGraphDigest"] = "sha256:" + _sha256(stack, "graph")
        record["lastModified"] = record.pop("lastModified")
        key = self.plans[spec.account_id].put_state(record, stack, region)
        self.note("newer_version", spec, stack, region, key, "version 12: read-only")

    def dns_stack(self, spec: DemoAccountSpec, stack: str, region: str) -> None:
        b = StackBuilder(spec, stack, region, version=11)
        domain = "acme.io" if spec is PRODUCTION else "platform.acme.eu"
        zone = b.hosted_zone("PublicZone", domain)
        b.output("NameServers", b.resources[zone]["attributes"]["NameServers"])  # a list, not a string
        out, alias = export_alias(stack, zone, "Id")
        b.output(out, b.resources[zone]["physicalId"], alias)
        b.output("ZoneConfig", {"domain": domain, "dnssec": False, "ttl": 300})
        key = self.save(b)
        self.note(
            "dns" if spec is PRODUCTION else "platform_dns", spec, stack, region, key, "NameServers output is a list"
        )

    def failed_deploy_leftovers(self, spec: DemoAccountSpec, stack: str, region: str) -> None:
        plan = self.plans[spec.account_id]
        rng = random.Random(f"{SEED}:{stack}")
        b = StackBuilder(spec, stack, region, version=11)
        build_data(b, "ShippingFiles")
        fs = b.lid("LabelsFileSystem")
        b.add(
            fs,
            "AWS::EFS::FileSystem",
            f"fs-0{_suffix(b.rng, 16, '0123456789abcdef')}",
            {"Encrypted": True, "PerformanceMode": "generalPurpose", "ThroughputMode": "elastic"},
            {"Arn": b.arn("elasticfilesystem", "file-system/fs-0")},
            deletion="Retain",
        )
        key = self.save(b, self.now - 20 * HOUR_MS)
        self.note(
            "with_journal_and_ledger",
            spec,
            stack,
            region,
            key,
            "rollback-journal.json and create-tokens.json beside it",
        )
        r = RunRecorder(stack, region, "deploy", self.now - 20 * HOUR_MS, rng)
        r.resource("CREATE", fs, "AWS::EFS::FileSystem", b.resources[fs]["physicalId"])
        ap = b.lid("LabelsAccessPoint")
        r.resource(
            "CREATE",
            ap,
            "AWS::EFS::AccessPoint",
            outcome="fail",
            error={
                "name": "ProvisioningError",
                "message": f"Failed to create {ap}: AccessPointLimitExceeded",
                "awsErrorCode": "AccessPointLimitExceeded",
                "requestId": _uuid(rng),
            },
        )
        r.finish()
        self.write_runs(spec, stack, region, [r])
        nonce = _suffix(rng, 32, "0123456789abcdef")
        base = _sha256(stack, fs)[:32]
        plan.put(
            plan.key(stack, region, "create-tokens.json"),
            cdkd_json(
                {
                    "ledgerVersion": 1,
                    "nonce": nonce,
                    "sent": {
                        fs: {
                            "base": base,
                            "token": _sha256(base, nonce)[:32],
                            "firstSentAt": self.now - 20 * HOUR_MS + 900,
                        }
                    },
                    "stateRecorded": True,
                }
            ),
        )
        plan.put(
            plan.key(stack, region, "rollback-journal.json"),
            cdkd_json(
                {
                    "journalVersion": 1,
                    "stackName": stack,
                    "region": region,
                    "segments": [
                        {
                            "runId": r.run_id,
                            "timestamp": r.finished_ms,
                            "reason": "no-rollback-failure",
                            "initialDeploy": False,
                            "cdkdVersion": CDKD_VERSION,
                            "operations": [
                                {
                                    "logicalId": fs,
                                    "changeType": "CREATE",
                                    "resourceType": "AWS::EFS::FileSystem",
                                    "provisionedBy": "sdk",
                                    "physicalId": b.resources[fs]["physicalId"],
                                    "properties": b.resources[fs]["properties"],
                                }
                            ],
                            "failedOperations": [
                                {
                                    "logicalId": ap,
                                    "changeType": "CREATE",
                                    "resourceType": "AWS::EFS::AccessPoint",
                                    "attemptedProperties": {
                                        "FileSystemId": {"Ref": fs},
                                        "PosixUser": {"Uid": "1000", "Gid": "1000"},
                                    },
                                }
                            ],
                        }
                    ],
                }
            ),
        )

    def skipped_destroy(self, spec: DemoAccountSpec, stack: str, region: str) -> None:
        rng = random.Random(f"{SEED}:{stack}")
        b = StackBuilder(spec, stack, region, version=10)
        build_analytics(b, "ImageResizer")
        table = next(k for k, v in b.resources.items() if v["resourceType"] == "AWS::Glue::Table")
        b.resources[table]["physicalId"] = "images_catalog"  # not `db|table`: the delete cannot address it
        keep = {table}
        r = RunRecorder(stack, region, "destroy", self.now - 3 * DAY_MS, rng)
        for lid, row in list(b.resources.items()):
            if lid == table:
                r.resource(
                    "DELETE",
                    lid,
                    row["resourceType"],
                    row["physicalId"],
                    outcome="skip",
                    reason="malformed composite physical id 'images_catalog' (expected 'database|table')",
                )
            elif row.get("deletionPolicy") == "Retain":
                r.resource("DELETE", lid, row["resourceType"], row["physicalId"], outcome="retain")
            else:
                r.resource("DELETE", lid, row["resourceType"], row["physicalId"])
        r.finish()
        b.resources = {k: v for k, v in b.resources.items() if k in keep}
        b.outputs = {}
        key = self.save(b, r.finished_ms)
        self.note("skipped_destroy", spec, stack, region, key, "destroy FAILED with RESOURCE_SKIPPED")
        prev = RunRecorder(stack, region, "deploy", self.now - 40 * DAY_MS, rng, "0.284.40")
        for lid, row in list(b.resources.items()):
            prev.resource("CREATE", lid, row["resourceType"], row["physicalId"])
        prev.finish()
        self.write_runs(spec, stack, region, [prev, r])

    def exports_indexes(self) -> None:
        for (account, region), exports in sorted(self.exports.items()):
            plan = self.plans[account]
            plan.put(
                f"{plan.spec.prefix}/_index/{region}/exports.json",
                cdkd_json(
                    {"indexVersion": 1, "region": region, "exports": exports, "lastModified": self.now - HOUR_MS}
                ),
            )
