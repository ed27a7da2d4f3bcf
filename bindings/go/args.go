// Argument checks the binding makes itself, before a C call: counts and sizes that a Go int or
// int64 holds but a C size_t or uint64_t does not.

package shardrec

import "fmt"

// nonNegative refuses a negative count or size, which the conversion to an unsigned C type would
// turn into a huge one (a -1 NumFeatures read as 18446744073709551615): ErrCodeInvalid naming
// field and value.
func nonNegative(field string, v int64) error {
	if v < 0 {
		return &Error{Code: ErrCodeInvalid, Message: fmt.Sprintf("%s must be >= 0, got %d", field, v)}
	}
	return nil
}
