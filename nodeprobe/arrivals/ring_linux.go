package arrivals

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// ring is one IP family's passive packet socket: AF_PACKET, SOCK_DGRAM, bound to one ethertype on every
// interface, with a TPACKET_V3 receive ring mapped into the process.
//
// The ring is mapped when the family is first watched, not when the socket opens: its pages are kernel memory
// the process maps whole, resident from the mmap (Blocks × BlockSize, 1 MiB by default), and a single-stack
// node never watches the other family. Once mapped it stays until close: a family watched once is watched
// again after the next change of its Services, and a ring cannot be resized while bound.
type ring struct {
	fd        int
	ethertype uint16
	// retire is the kernel's block timeout (Config.BlockTimeout), in milliseconds, for the ring when mapped.
	retire uint32
	// mem is the mapped ring, nil until the family is first watched. The receive loop loads it without the
	// meter's lock while Watch maps it under that lock, hence atomic; set once, it never changes until close.
	mem       atomic.Pointer[[]byte]
	blockSize int
	blocks    int
	cur       int // the next block to read
	bound     bool
}

// frameSize only has to pass the kernel's checks on TPACKET_V3 (at least a frame header, a multiple of
// TPACKET_ALIGNMENT, dividing the block): V3 packs frames by their real length.
const frameSize = 256

func openRing(ethertype uint16, cfg Config) (*ring, error) {
	// Protocol 0: the socket receives nothing until bind, after the filter is in place.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket(AF_PACKET, SOCK_DGRAM): %w", err)
	}
	page := os.Getpagesize()
	r := &ring{fd: fd, ethertype: ethertype, retire: uint32(max(1, cfg.BlockTimeout.Milliseconds())),
		blockSize: (cfg.BlockSize + page - 1) / page * page, blocks: cfg.Blocks}
	if err := r.setup(); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

func (r *ring) setup() error {
	if err := unix.SetsockoptInt(r.fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V3); err != nil {
		return fmt.Errorf("setsockopt(PACKET_VERSION, TPACKET_V3): %w", err)
	}
	return r.setFilter(dropAll())
}

// mapRing gives the socket its receive ring and maps it, once: before the socket is first bound.
func (r *ring) mapRing() error {
	if r.mem.Load() != nil {
		return nil
	}
	req := unix.TpacketReq3{
		Block_size:     uint32(r.blockSize),
		Block_nr:       uint32(r.blocks),
		Frame_size:     frameSize,
		Frame_nr:       uint32(r.blockSize / frameSize * r.blocks),
		Retire_blk_tov: r.retire,
	}
	if err := unix.SetsockoptTpacketReq3(r.fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req); err != nil {
		return fmt.Errorf("setsockopt(PACKET_RX_RING, %d × %d bytes): %w", r.blocks, r.blockSize, err)
	}
	mem, err := unix.Mmap(r.fd, 0, r.blockSize*r.blocks, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap of the packet ring: %w", err)
	}
	r.mem.Store(&mem)
	return nil
}

// setFilter replaces the socket's classic BPF program; the kernel swaps it atomically.
func (r *ring) setFilter(raw []bpf.RawInstruction) error {
	ins := make([]unix.SockFilter, len(raw))
	for i, in := range raw {
		ins[i] = unix.SockFilter{Code: in.Op, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	prog := unix.SockFprog{Len: uint16(len(ins)), Filter: &ins[0]}
	if err := unix.SetsockoptSockFprog(r.fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog); err != nil {
		return fmt.Errorf("setsockopt(SO_ATTACH_FILTER, %d instructions): %w", len(ins), err)
	}
	return nil
}

// bind hooks the socket into the receive path for its ethertype on every interface (sll_ifindex 0), or
// unhooks it (protocol 0) so a family with nothing to watch costs nothing.
func (r *ring) bind(on bool) error {
	if on == r.bound {
		return nil
	}
	var proto uint16
	if on {
		if err := r.mapRing(); err != nil {
			return err
		}
		var be [2]byte
		binary.BigEndian.PutUint16(be[:], r.ethertype) // sll_protocol is in network byte order
		proto = binary.NativeEndian.Uint16(be[:])
	}
	if err := unix.Bind(r.fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: 0}); err != nil {
		return fmt.Errorf("bind(AF_PACKET, ethertype %#04x): %w", r.ethertype, err)
	}
	r.bound = on
	return nil
}

// stats returns what the kernel counted since the last call (PACKET_STATISTICS resets on read): packets the
// filter passed, including those dropped, and those dropped because the ring was full.
func (r *ring) stats() (received, dropped uint64, err error) {
	st, err := unix.GetsockoptTpacketStatsV3(r.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	if err != nil {
		return 0, 0, fmt.Errorf("getsockopt(PACKET_STATISTICS): %w", err)
	}
	return uint64(st.Packets), uint64(st.Drops), nil
}

func blockHeader(b []byte) *unix.TpacketHdrV1 {
	desc := (*unix.TpacketBlockDesc)(unsafe.Pointer(&b[0]))
	return (*unix.TpacketHdrV1)(unsafe.Pointer(&desc.Hdr[0]))
}

// ready returns the next block if the kernel has handed it to user space.
func (r *ring) ready() []byte {
	mem := r.mem.Load()
	if mem == nil {
		return nil // never watched: nothing can have arrived
	}
	b := (*mem)[r.cur*r.blockSize : (r.cur+1)*r.blockSize]
	if atomic.LoadUint32(&blockHeader(b).Block_status)&unix.TP_STATUS_USER == 0 {
		return nil
	}
	return b
}

// release gives the current block back to the kernel and moves to the next one.
func (r *ring) release(b []byte) {
	atomic.StoreUint32(&blockHeader(b).Block_status, unix.TP_STATUS_KERNEL)
	r.cur = (r.cur + 1) % r.blocks
}

// blockPackets is the number of packets in a TPACKET_V3 block.
func blockPackets(b []byte) int { return int(blockHeader(b).Num_pkts) }

// sllOffset is where the kernel puts each frame's struct sockaddr_ll: right after the tpacket3_hdr, aligned
// (TPACKET_ALIGN(sizeof(struct tpacket3_hdr))). Its sll_ifindex, 4 bytes in, is the interface the packet
// arrived on.
const sllOffset = (unix.SizeofTpacket3Hdr + unix.TPACKET_ALIGNMENT - 1) &^ (unix.TPACKET_ALIGNMENT - 1)

// walkBlock calls fn with each packet of a TPACKET_V3 block (from its network header: SOCK_DGRAM), its kernel
// receive time in unix nanoseconds and the index of the interface it arrived on (0 when the frame carries
// none). It stops at the first frame that does not fit in the block.
func walkBlock(b []byte, fn func(data []byte, at int64, ifindex int32)) {
	if len(b) < int(unsafe.Sizeof(unix.TpacketBlockDesc{})) {
		return
	}
	h := blockHeader(b)
	off := int(h.Offset_to_first_pkt)
	for i := uint32(0); i < h.Num_pkts; i++ {
		if off <= 0 || off+unix.SizeofTpacket3Hdr > len(b) {
			return
		}
		ph := (*unix.Tpacket3Hdr)(unsafe.Pointer(&b[off]))
		start := off + int(ph.Mac)
		end := start + int(ph.Snaplen)
		if int(ph.Mac) < unix.SizeofTpacket3Hdr || end > len(b) {
			return
		}
		var ifindex int32
		if sll := off + sllOffset; sll+unix.SizeofSockaddrLinklayer <= start {
			ifindex = int32(binary.NativeEndian.Uint32(b[sll+4:]))
		}
		fn(b[start:end], int64(ph.Sec)*1e9+int64(ph.Nsec), ifindex)
		if ph.Next_offset == 0 {
			return
		}
		off += int(ph.Next_offset)
	}
}

func (r *ring) close() {
	if mem := r.mem.Swap(nil); mem != nil {
		_ = unix.Munmap(*mem)
	}
	if r.fd >= 0 {
		_ = unix.Close(r.fd)
		r.fd = -1
	}
}
