// Go's error idioms on libshardrec errors: a typed Code printing its C name, sentinels for
// errors.Is, CodeOf and errors.As through fmt.Errorf's %w, and the message without the code.
package shardrec

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestErrorsFollowGoIdioms(t *testing.T) {
	coll := testWorld1Collection(t)
	defer coll.Close()
	_, err := coll.TableStates("nope")
	if err == nil {
		t.Fatal("an unknown table was accepted")
	}
	wrapped := fmt.Errorf("loading: %w", err)

	// The code is typed and prints its name.
	if got := CodeOf(wrapped); got != ErrCodeNotFound {
		t.Fatalf("CodeOf(wrapped) = %v, want %v", got, ErrCodeNotFound)
	}
	if s := fmt.Sprint(CodeOf(err)); s != "SHARDREC_ENOTFOUND" {
		t.Fatalf("a Code prints %q", s)
	}
	if s := ErrCodeInvalid.String(); s != "SHARDREC_EINVAL" {
		t.Fatalf("ErrCodeInvalid.String() = %q", s)
	}
	if CodeOf(nil) != ErrCodeOK || CodeOf(errors.New("other")) != ErrCodeOK {
		t.Fatal("CodeOf of nil or a foreign error is not ErrCodeOK")
	}

	// Sentinels match by code, also through %w, and only their own code.
	if !errors.Is(err, ErrNotFound) || !errors.Is(wrapped, ErrNotFound) {
		t.Fatalf("errors.Is(%v, ErrNotFound) is false", wrapped)
	}
	if errors.Is(wrapped, ErrInvalid) {
		t.Fatal("a not-found error is ErrInvalid")
	}

	// errors.As finds the *Error; its message is the library's, the code printed once.
	var e *Error
	if !errors.As(wrapped, &e) {
		t.Fatal("errors.As found no *Error")
	}
	if e.Code != ErrCodeNotFound || strings.Contains(e.Message, "SHARDREC_") ||
		!strings.Contains(e.Message, "nope") {
		t.Fatalf("Code %v, Message %q", e.Code, e.Message)
	}
	if got := wrapped.Error(); got != "loading: SHARDREC_ENOTFOUND: "+e.Message ||
		strings.Count(got, "SHARDREC_") != 1 {
		t.Fatalf("wrapped.Error() = %q", got)
	}

	// Checks made in Go before the C call are *Errors too.
	_, err = coll.TableStates("a\x00b")
	if !errors.Is(err, ErrInvalid) || CodeOf(err) != ErrCodeInvalid {
		t.Fatalf("a NUL in a name: %v", err)
	}
}

type wrappingStore struct{}

func (wrappingStore) Set(string, []byte) error {
	return fmt.Errorf("set: %w", &Error{Code: ErrCodeIO, Message: "store down"})
}

func (wrappingStore) Get(string, int64) ([]byte, error) { return nil, errors.New("store down") }

// A store's wrapped *Error reports its own code to the library (it reported SHARDREC_ERROR).
func TestStoreErrorsKeepTheirCodeWhenWrapped(t *testing.T) {
	_, err := NewCommWithStore(wrappingStore{}, 2, 0, &CommOptions{TimeoutMs: 2000})
	var e *Error
	if !errors.As(err, &e) || !strings.Contains(e.Message, fmt.Sprintf("returned code %d", ErrCodeIO)) {
		t.Fatalf("wrapping store: %v", err)
	}
}
