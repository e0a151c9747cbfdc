// Package extauthz adapts the gate (package binding) to the protocols that
// proxies speak: Envoy's envoy.service.auth.v3.Authorization/Check over gRPC,
// and a plain HTTP check for Envoy's http_service mode and for forward-auth
// proxies (nginx auth_request, Caddy forward_auth, Traefik forwardAuth).
// Both build a binding.Request from what the proxy sent, call the same
// Gate.Check, and translate the one Decision back; neither decides anything.
package extauthz
