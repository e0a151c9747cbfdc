package preflight

import "strconv"

// stepField is the pointer to a field of plan step i, such as
// "/plan/steps/1/zone".
func stepField(i int, field string) string {
	return "/plan/steps/" + strconv.Itoa(i) + "/" + field
}
