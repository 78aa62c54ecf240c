// Validate Gateway API and prometheus-operator objects with the schemas @kubernetes-models/gateway-api and
// @kubernetes-models/prometheus-operator compile from their CRDs.
// stdin: a JSON array of objects; stdout: a JSON array with, per object, its list of errors.
import { readFileSync } from "node:fs";

const PACKAGES = {
  "gateway.networking.k8s.io": "@kubernetes-models/gateway-api",
  "monitoring.coreos.com": "@kubernetes-models/prometheus-operator",
};

const objects = JSON.parse(readFileSync(0, "utf8"));
const results = [];
for (const object of objects) {
  const [group, version] = object.apiVersion.split("/");
  let Model;
  try {
    ({ [object.kind]: Model } = await import(`${PACKAGES[group]}/${group}/${version}/${object.kind}`));
  } catch (error) {
    results.push([`no schema for ${object.apiVersion} ${object.kind}: ${error.message}`]);
    continue;
  }
  try {
    new Model(object).validate();
    results.push([]);
  } catch (error) {
    const errors = error.errors ?? [{ instancePath: "", message: error.message }];
    results.push(errors.map((e) => `${e.instancePath || "/"}: ${e.message}`));
  }
}
process.stdout.write(JSON.stringify(results));
