"""The endpoint as typed data, by what it holds; `gateway.build_endpoint` builds it from the settings in
one place (Envoy Gateway v1.9.0, AWS Load Balancer Controller v3.5.0):

- `models`: the typed Gateway API and Envoy Gateway objects (their CRDs' fields), the load balancer
  Service;
- `chart`: Envoy Gateway's chart values, its CRDs and its namespace;
- `gateway`: the gateway's objects for the serving app: GatewayClass, EnvoyProxy, Gateway, HTTPRoute, the
  policies and the load balancer Service (`EndpointManifests`).
"""
