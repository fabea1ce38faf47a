// Command __NAME__ is a Spool handler written in Go (task type `__NAME__`).
//
// Spool runs it as a plain WASI program: the task's JSON payload arrives on stdin, the
// result is whatever the program prints on stdout, and the exit status tells how it went
// (0 = done; anything else = failed, retried per the task type's policy, with the last line
// of stderr as the reason). `spool plugin build` builds it into a WASI preview1 module
// (GOOS=wasip1 GOARCH=wasm go build) and puts __NAME__.wasm into the plugin folder.
//
// This starter turns {"text": "hello"} into {"length": 5}.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"unicode/utf8"
)

// Payload is the task's input. Add the fields your task needs; a pointer field is nil
// when the payload does not have it.
type Payload struct {
	Text *string `json:"text"`
}

// Result is printed on stdout as JSON and stored as the task's result.
type Result struct {
	Length int `json:"length"`
}

func main() {
	// Read the whole payload from stdin and decode it.
	input, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail("cannot read the payload: %v", err)
	}
	var payload Payload
	if err := json.Unmarshal(input, &payload); err != nil {
		fail("cannot decode the payload: %v", err)
	}
	if payload.Text == nil {
		fail(`the payload needs a "text" string`)
	}

	// Do the work.
	result := Result{Length: utf8.RuneCountInString(*payload.Text)}

	// Print the result; returning from main exits with status 0 (success).
	if err := json.NewEncoder(os.Stdout).Encode(result); err != nil {
		fail("cannot write the result: %v", err)
	}
}

// fail prints the reason on stderr and exits with status 1, so Spool records the failure.
func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}
