// Evaluate IAM requests with @cloud-copilot/iam-simulate, the way AWS decides them: identity policies
// (a role's managed and inline policies together) and, for AssumeRoleWithWebIdentity, the role's trust
// policy as its resource policy; for a KMS key, its key policy.
// stdin: {"policies": {name: document}, "simulations": [{"identity": [name...], "resource": name or null,
// "request": <the package's request shape>}]}; each policy is validated once for the whole batch.
// "unsafe": true runs the simulator's core without its request checks, which drop context keys AWS's
// published data does not list for the action (an OIDC provider's own `<provider>:sub` and `:aud`) and
// refuse an ARN with no account (AWS's public SSM parameters); the policies are validated all the same.
// stdout: a JSON array with, per simulation, "Allowed", "ExplicitlyDenied", "ImplicitlyDenied", or
// "error: <what the simulator refused>". One process evaluates the batch (tests/iam_simulator.py).
import { readFileSync } from "node:fs";
import { runSimulation, runUnsafeSimulation } from "@cloud-copilot/iam-simulate";
import {
  createValidatedPolicy,
  validateIdentityPolicy,
  validateResourcePolicy,
  validateTrustPolicy,
} from "@cloud-copilot/iam-policy";

const { policies, simulations } = JSON.parse(readFileSync(0, "utf8"));
const identity = new Map();
const resource = new Map();
const validated = (cache, name, validate) => {
  if (!cache.has(name)) cache.set(name, createValidatedPolicy(policies[name], validate, { name }));
  return cache.get(name);
};
const results = [];
for (const { identity: names, resource: trust, request, unsafe } of simulations) {
  const simulation = {
    identityPolicies: names.map((name) => ({ name, policy: validated(identity, name, validateIdentityPolicy) })),
    serviceControlPolicies: [],
    resourceControlPolicies: [],
    request,
  };
  if (trust) {
    const validate = request.action === "sts:AssumeRoleWithWebIdentity" ? validateTrustPolicy : validateResourcePolicy;
    simulation.resourcePolicy = validated(resource, trust, validate);
  }
  if (unsafe) {
    const invalid = [...simulation.identityPolicies.map((p) => p.policy), simulation.resourcePolicy]
      .filter((p) => p && p.errors.length > 0)
      .map((p) => p.errors);
    results.push(invalid.length > 0 ? `error: ${JSON.stringify(invalid)}` : runUnsafeSimulation(simulation, {}));
    continue;
  }
  const response = await runSimulation(simulation, {});
  results.push(
    response.resultType === "error" ? `error: ${JSON.stringify(response.errors)}` : response.overallResult,
  );
}
process.stdout.write(JSON.stringify(results));
