package terraform

// NocloudTemplate lets the module's external tests compare the template
// tofu evaluates with the one the module holds.
const NocloudTemplate = nocloudTemplate

// QuoteList is the HCL list the module writes for xs, and the string it
// refused, if any.
func QuoteList(xs []string) ([]byte, *string) {
	var v values
	list := v.list(xs)
	return list.Bytes(), v.bad
}
