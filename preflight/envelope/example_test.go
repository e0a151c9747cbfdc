package envelope_test

import (
	"fmt"
	"os"

	"github.com/contractrefine/autonomy/preflight/envelope"
)

func ExampleValidate() {
	raw, err := os.ReadFile("testdata/invalid.json")
	if err != nil {
		fmt.Println(err)
		return
	}
	env, errs := envelope.Validate(raw)
	fmt.Println("envelope:", env)
	for _, e := range errs {
		fmt.Println(e.Code, e.Path, e.Message)
	}
	// Output:
	// envelope: <nil>
	// contract-validation-failed /idempotencyKey A stable idempotency key is required.
	// contract-validation-failed /timestampUtc timestampUtc must be an RFC 3339 UTC timestamp ending in Z.
	// contract-validation-failed /riskLevel riskLevel must be one of: low, medium, high, critical.
}
