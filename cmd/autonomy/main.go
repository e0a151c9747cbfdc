// Command autonomy is the ContractRefine service: a preflight verifier and an
// Envoy ext_authz server in one binary.
package main

func main() {}
