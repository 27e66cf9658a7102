package collector

import (
	"io"

	"github.com/klauspost/compress/gzip"
)

// GzipBlock is the size of the writes WriteText makes. Gzip's writer compresses each as a block of its own, so
// it sets the ratio: at 32 KiB a 1,000-Service scrape compresses 3 % larger than with a stateful BestSpeed, and
// 64 KiB buffers gain under 1 % more (BenchmarkGzipScrape; docs/performance.md).
const GzipBlock = 32 << 10

// Gzip is the compressor of one scrape's text, writing to w: gzip without state kept between writes
// (klauspost/compress's StatelessCompression). A stateful compressor holds 800 kB to 1.2 MB of tables and
// window, which either stays in the heap between scrapes (a fortieth of the exporter's resident set at 1,000
// Services, on every node) or is allocated and zeroed anew per scrape (about 1 ms, more than compressing a
// 1,000-Service scrape). Without state, each write of GzipBlock bytes is compressed on its own, with less CPU
// than the standard library's BestSpeed and nothing kept: the exposition's lines repeat their names and
// labels within a block.
func Gzip(w io.Writer) *gzip.Writer {
	gz, err := gzip.NewWriterLevel(w, gzip.StatelessCompression)
	if err != nil {
		panic("gzip refused its own StatelessCompression level: " + err.Error())
	}
	return gz
}
