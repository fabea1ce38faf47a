// Command wordcount is a Spool handler written in Go, a plain WASI program (task type
// `wordcount`). Built with GOOS=wasip1 GOARCH=wasm it is a core module exporting `_start`.
//
// It reads the task's JSON payload on stdin and prints the result on stdout:
//
//	{"text": "The cat and the hat", "top": 2}
//	→ {"words": 5, "lines": 1, "top": [{"word": "the", "count": 2}, {"word": "and", "count": 1}]}
//
// Words are runs of letters and digits (an apostrophe inside a word is kept: "don't"),
// lower-cased. `top` (default 10) is how many of the most frequent words to list, most
// frequent first, ties in alphabetical order. `lines` counts the lines of the text (a final
// line without a newline counts too; an empty text has none).
//
// Exit status: 0 on success; 2 when the payload is not such an object (stderr says why);
// 1 with the message on stderr when the payload has "fail": "message", to try the failure path.
// Spool retries any non-zero exit per the task type's policy, with the last line of stderr
// as the reason.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"unicode"
)

// defaultTop is how many words the result lists when the payload gives no `top`.
const defaultTop = 10

// payload is the task's input. Pointers tell a missing field from a zero value.
type payload struct {
	Text *string `json:"text"`
	Top  *int    `json:"top"`
	Fail *string `json:"fail"`
}

// wordCount is one entry of the result's `top` list.
type wordCount struct {
	Word  string `json:"word"`
	Count int    `json:"count"`
}

// result is what the handler prints on stdout.
type result struct {
	Words int         `json:"words"`
	Lines int         `json:"lines"`
	Top   []wordCount `json:"top"`
}

func main() {
	input, err := io.ReadAll(os.Stdin)
	if err != nil {
		exit(2, "cannot read the payload from stdin: %v", err)
	}
	var p payload
	if err := json.Unmarshal(input, &p); err != nil {
		exit(2, `the payload must be a JSON object {"text": string, "top": integer}: %v`, err)
	}
	if p.Fail != nil {
		exit(1, "wordcount fails on request: %s", *p.Fail)
	}
	if p.Text == nil {
		exit(2, `the payload needs a "text" string`)
	}
	top := defaultTop
	if p.Top != nil {
		if *p.Top < 0 {
			exit(2, `"top" must be zero or more, got %d`, *p.Top)
		}
		top = *p.Top
	}

	out := count(*p.Text, top)
	encoder := json.NewEncoder(os.Stdout)
	encoder.SetEscapeHTML(false) // keep <, > and & as they are in words
	if err := encoder.Encode(out); err != nil {
		exit(2, "cannot write the result: %v", err)
	}
}

// count computes the result for a text, listing at most `top` words.
func count(text string, top int) result {
	isWordRune := func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) || r == '\'' }
	counts := map[string]int{}
	words := 0
	for _, field := range strings.FieldsFunc(text, func(r rune) bool { return !isWordRune(r) }) {
		word := strings.Trim(field, "'") // quotes around a word are not part of it
		if word == "" {
			continue
		}
		counts[strings.ToLower(word)]++
		words++
	}

	list := make([]wordCount, 0, len(counts))
	for word, n := range counts {
		list = append(list, wordCount{Word: word, Count: n})
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].Count != list[j].Count {
			return list[i].Count > list[j].Count
		}
		return list[i].Word < list[j].Word
	})
	if len(list) > top {
		list = list[:top]
	}

	lines := strings.Count(text, "\n")
	if text != "" && !strings.HasSuffix(text, "\n") {
		lines++
	}
	return result{Words: words, Lines: lines, Top: list}
}

// exit prints a message on stderr and ends the program with the given status.
func exit(status int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(status)
}
