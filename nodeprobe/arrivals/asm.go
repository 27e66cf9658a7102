package arrivals

import (
	"fmt"

	"golang.org/x/net/bpf"
)

// asm lays out a classic BPF program written with labels. golang.org/x/net/bpf encodes instructions but
// takes relative jump offsets, and a conditional jump reaches at most 255 instructions ahead: a search tree
// over a few hundred ports or addresses jumps further. asm resolves labels and routes every conditional
// jump whose target is too far through an unconditional `ja` (32-bit offset) placed right after it.
type asm struct {
	items   []asmItem
	nlabels int
}

type label int

// next is the instruction after the jump: the fall-through.
const next label = -1

type asmKind uint8

const (
	kindInsn asmKind = iota
	kindCond
	kindJump
	kindMark
)

type asmItem struct {
	kind asmKind
	ins  bpf.Instruction
	cond bpf.JumpTest
	val  uint32
	t, f label // kindCond targets; kindJump and kindMark use t
}

func (a *asm) label() label {
	a.nlabels++
	return label(a.nlabels - 1)
}

// mark places l at the next instruction.
func (a *asm) mark(l label) { a.items = append(a.items, asmItem{kind: kindMark, t: l}) }

func (a *asm) emit(ins ...bpf.Instruction) {
	for _, in := range ins {
		a.items = append(a.items, asmItem{kind: kindInsn, ins: in})
	}
}

// jif jumps to t when `A cond val` holds, else to f.
func (a *asm) jif(cond bpf.JumpTest, val uint32, t, f label) {
	a.items = append(a.items, asmItem{kind: kindCond, cond: cond, val: val, t: t, f: f})
}

// ja jumps to l unconditionally.
func (a *asm) ja(l label) { a.items = append(a.items, asmItem{kind: kindJump, t: l}) }

// tree emits a binary search over keys (sorted, distinct) for the value in A: a jump to target(i) when A
// equals keys[i], to miss otherwise. A packet runs about 2·log2(len(keys)) comparisons, not len(keys).
func (a *asm) tree(keys []uint32, target func(i int) label, miss label) {
	a.subtree(keys, 0, target, miss)
}

func (a *asm) subtree(keys []uint32, base int, target func(i int) label, miss label) {
	const linear = 4
	if len(keys) <= linear {
		for i, k := range keys {
			a.jif(bpf.JumpEqual, k, target(base+i), next)
		}
		a.ja(miss)
		return
	}
	mid := len(keys) / 2
	right := a.label()
	a.jif(bpf.JumpGreaterOrEqual, keys[mid], right, next)
	a.subtree(keys[:mid], base, target, miss)
	a.mark(right)
	a.subtree(keys[mid:], base+mid, target, miss)
}

// assemble resolves the labels and returns the program.
func (a *asm) assemble() ([]bpf.Instruction, error) {
	n := len(a.items)
	expT := make([]bool, n)
	expF := make([]bool, n)
	pos := make([]int, n+1)
	labelPos := make([]int, a.nlabels)
	size := func(i int) int {
		switch a.items[i].kind {
		case kindMark:
			return 0
		case kindCond:
			s := 1
			if expT[i] {
				s++
			}
			if expF[i] {
				s++
			}
			return s
		}
		return 1
	}
	target := func(i int, l label) int {
		if l == next {
			return pos[i] + size(i)
		}
		return labelPos[l]
	}
	for i := range labelPos {
		labelPos[i] = -1
	}
	// Expanding a jump only moves code further apart, so this reaches a fixed point.
	for {
		p := 0
		for i, it := range a.items {
			pos[i] = p
			if it.kind == kindMark {
				labelPos[it.t] = p
			}
			p += size(i)
		}
		pos[n] = p
		changed := false
		for i, it := range a.items {
			if it.kind != kindCond {
				continue
			}
			if !expT[i] && target(i, it.t)-(pos[i]+1) > 255 {
				expT[i], changed = true, true
			}
			if !expF[i] && target(i, it.f)-(pos[i]+1) > 255 {
				expF[i], changed = true, true
			}
		}
		if !changed {
			break
		}
	}
	out := make([]bpf.Instruction, 0, pos[n])
	skip := func(i int, from, to int) (int, error) {
		if to < 0 {
			return 0, fmt.Errorf("bpf assembly: item %d jumps to an unplaced label", i)
		}
		if to < from {
			return 0, fmt.Errorf("bpf assembly: item %d jumps backwards", i)
		}
		return to - from, nil
	}
	for i, it := range a.items {
		switch it.kind {
		case kindMark:
		case kindInsn:
			out = append(out, it.ins)
		case kindJump:
			s, err := skip(i, pos[i]+1, labelPos[it.t])
			if err != nil {
				return nil, err
			}
			out = append(out, bpf.Jump{Skip: uint32(s)})
		case kindCond:
			// Layout: the conditional jump, then the trampoline for t if expanded, then the one for f.
			slot := pos[i] + 1
			var trampolines []bpf.Instruction
			// via routes a branch through a trampoline at the next free slot when it was expanded.
			via := func(expanded bool, to int) (int, error) {
				if !expanded {
					return to, nil
				}
				s, err := skip(i, slot+1, to)
				trampolines = append(trampolines, bpf.Jump{Skip: uint32(s)})
				slot++
				return slot - 1, err
			}
			tAt, err := via(expT[i], target(i, it.t))
			if err != nil {
				return nil, err
			}
			fAt, err := via(expF[i], target(i, it.f))
			if err != nil {
				return nil, err
			}
			st, err := skip(i, pos[i]+1, tAt)
			if err != nil {
				return nil, err
			}
			sf, err := skip(i, pos[i]+1, fAt)
			if err != nil {
				return nil, err
			}
			out = append(out, bpf.JumpIf{Cond: it.cond, Val: it.val, SkipTrue: uint8(st), SkipFalse: uint8(sf)})
			out = append(out, trampolines...)
		}
	}
	return out, nil
}
