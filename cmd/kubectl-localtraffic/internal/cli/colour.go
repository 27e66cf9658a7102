package cli

// ANSI colours for the text output on a terminal.
const (
	Red    = "\x1b[31m"
	Green  = "\x1b[32m"
	Yellow = "\x1b[33m"
	Dim    = "\x1b[2m"
	Bold   = "\x1b[1m"
	Reset  = "\x1b[0m"
)

// Painter colours text when true (--color, or a terminal).
type Painter bool

// Paint is s in colour, or s as it is without colour.
func (p Painter) Paint(colour, s string) string {
	if !p {
		return s
	}
	return colour + s + Reset
}
