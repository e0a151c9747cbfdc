package preflight

import (
	"strconv"

	"github.com/contractrefine/autonomy/internal/jsonptr"
)

// stepField is the pointer to a field of plan step i, such as
// "/plan/steps/1/zone".
func stepField(i int, field string) string {
	return "/plan/steps/" + strconv.Itoa(i) + "/" + field
}

// memberPaths are the JSON Pointers of the members named in memberNames
// under the objects of a request that are not in an array or under the
// first steps, by parent pointer and name: the pointer of every member
// read is built before its value is, one allocation a member otherwise.
var memberPaths = func() map[string]map[string]string {
	parents := append([]string{"", "/intent", "/plan", "/context", "/context/actor", "/context/attestation"}, stepPaths[:]...)
	m := make(map[string]map[string]string, len(parents))
	for _, parent := range parents {
		m[parent] = make(map[string]string, len(memberNames))
		for _, tok := range memberNames {
			name := tok.(string)
			m[parent][name] = parent + "/" + jsonptr.Escape(name)
		}
	}
	return m
}()

// memberPath is the JSON Pointer of member name of the object at parent.
func memberPath(parent, name string) string {
	if p, ok := memberPaths[parent][name]; ok {
		return p
	}
	return parent + "/" + jsonptr.Escape(name)
}

// elementPath is the JSON Pointer of element i of the array at parent.
func elementPath(parent string, i int) string {
	if parent == "/plan/steps" && i < len(stepPaths) {
		return stepPaths[i]
	}
	return parent + "/" + strconv.Itoa(i)
}

// stepPaths are the pointers of the first steps.
var stepPaths = func() (ps [4]string) {
	for i := range ps {
		ps[i] = "/plan/steps/" + strconv.Itoa(i)
	}
	return ps
}()
