// Command autonomy is the ContractRefine service: a preflight verifier and an
// Envoy ext_authz gate in one binary. See `autonomy --help`.
package main

import "github.com/contractrefine/autonomy/internal/cli"

func main() { cli.Run() }
