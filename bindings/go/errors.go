// Errors of libshardrec calls: the status code as a typed Code, the *Error every failed call
// returns, sentinels for errors.Is and CodeOf, which sees through wrapping.

package shardrec

import (
	"errors"

	"shardrec.dev/shardrec/internal/swig"
)

// Code is a libshardrec status code (shardrec_status_t, shardrec/common.h): 0 is success, the
// failures are negative. String gives its C name, e.g. "SHARDREC_EINVAL".
type Code int32

// String is the code's C name, e.g. "SHARDREC_EINVAL" (shardrec_status_string).
func (c Code) String() string { return swig.Status_string(int(c)) }

// Status codes of libshardrec (shardrec/common.h).
const (
	ErrCodeOK          Code = 0
	ErrCodeGeneric     Code = -1
	ErrCodeInvalid     Code = -2 // a bad argument: refused before anything changed
	ErrCodeUsage       Code = -3 // a call out of order, or a handle used by two goroutines at once
	ErrCodeNoMemory    Code = -4
	ErrCodeCuda        Code = -5
	ErrCodeRemote      Code = -6 // a peer failed or left
	ErrCodeTimeout     Code = -7
	ErrCodeIO          Code = -8
	ErrCodeCorrupt     Code = -9
	ErrCodeUnsupported Code = -10
	ErrCodeNotFound    Code = -11
	ErrCodeInternal    Code = -12
	ErrCodeNoDevice    Code = -13
	ErrCodeAborted     Code = -14 // Comm.Abort was called on this communicator's failure domain
)

// Error is a failed libshardrec call. Every error the package returns for a refusal or failure
// of the library is an *Error (argument checks made in Go before the C call included), possibly
// wrapped by the caller; match it with errors.As(err, &e) (e a *shardrec.Error), with
// errors.Is(err, shardrec.ErrInvalid) and the other sentinels, or read its code with CodeOf.
type Error struct {
	// Code is the C status, one of the ErrCode constants (never ErrCodeOK).
	Code Code
	// Message is the library's message, as shardrec_last_error gave it on the failing call's
	// thread (copied in the same cgo call), without the code: e.g. "table 'x' is not dynamic".
	Message string
}

// Error is "<code name>: <message>", e.g. "SHARDREC_EINVAL: table 'x' is not dynamic": the code
// once, then the library's message.
func (e *Error) Error() string { return e.Code.String() + ": " + e.Message }

// CodeName is the status name, e.g. "SHARDREC_EINVAL" (e.Code.String()).
func (e *Error) CodeName() string { return e.Code.String() }

// Is reports whether target is an *Error with the same code: errors.Is(err, shardrec.ErrNotFound)
// holds for every not-found error, wrapped or not, whatever its message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t != nil && e != nil && t.Code == e.Code
}

// Sentinels for errors.Is, one per code: errors.Is(err, ErrInvalid) holds for every *Error whose
// Code is ErrCodeInvalid, also through fmt.Errorf("...: %w", err). Their messages are the codes'
// names; they are never returned themselves.
var (
	ErrGeneric     = sentinel(ErrCodeGeneric)
	ErrInvalid     = sentinel(ErrCodeInvalid)
	ErrUsage       = sentinel(ErrCodeUsage)
	ErrNoMemory    = sentinel(ErrCodeNoMemory)
	ErrCuda        = sentinel(ErrCodeCuda)
	ErrRemote      = sentinel(ErrCodeRemote)
	ErrTimeout     = sentinel(ErrCodeTimeout)
	ErrIO          = sentinel(ErrCodeIO)
	ErrCorrupt     = sentinel(ErrCodeCorrupt)
	ErrUnsupported = sentinel(ErrCodeUnsupported)
	ErrNotFound    = sentinel(ErrCodeNotFound)
	ErrInternal    = sentinel(ErrCodeInternal)
	ErrNoDevice    = sentinel(ErrCodeNoDevice)
	ErrAborted     = sentinel(ErrCodeAborted)
)

func sentinel(c Code) *Error { return &Error{Code: c, Message: "libshardrec status"} }

// CodeOf returns the status code of err when err is, or wraps, an *Error (errors.As); else
// ErrCodeOK (0), also for nil.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) && e != nil {
		return e.Code
	}
	return ErrCodeOK
}

func init() {
	swig.NewError = func(code int, message string) error {
		return &Error{Code: Code(code), Message: message}
	}
	swig.ErrorCode = func(err error) (int, bool) {
		c := CodeOf(err)
		return int(c), c != ErrCodeOK
	}
}
