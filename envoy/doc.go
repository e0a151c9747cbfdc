// Package envoy holds no code: it is the home of the shipped Envoy, Docker
// Compose and Kubernetes configuration, and of the tests that check it.
//
// The files beside this one are what an operator deploys: envoy.yaml (the
// front proxy of docker-compose.yml, ext_authz over gRPC), envoy-http-service.yaml
// (the same with ext_authz in http_service mode), envoy-sidecar.yaml (a sidecar
// reaching the service over a Unix socket), k8s/pod.yaml (the sidecar layout on
// Kubernetes) and autonomy.yaml (the service configuration compose mounts).
// No Envoy or Docker runs in the tests; instead each Envoy file is decoded into
// go-control-plane's Bootstrap proto and validated with its generated rules,
// and the compose file, the Dockerfile and the pod are checked against each
// other, so that a renamed service or a moved port fails a test rather than a
// deployment. The Envoy snippet in docs/DEPLOY.md is validated the same way.
package envoy
