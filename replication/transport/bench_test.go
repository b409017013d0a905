package transport

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/flexkv/flexkv/multicast/channel"
	"github.com/flexkv/flexkv/partition"
)

// countingHandler counts the frames it accepts and signals each call.
type countingHandler struct {
	frames atomic.Int64
	called chan struct{} // capacity 1
}

func (h *countingHandler) Deliver(_ context.Context, _ partition.GroupID, frames []channel.Frame) (string, error) {
	h.frames.Add(int64(len(frames)))
	select {
	case h.called <- struct{}{}:
	default:
	}
	return "", nil
}

// BenchmarkTransmitter measures frames/s from a Transmitter to one leader
// over loopback gRPC, with frames of a 100-byte payload, for several batch
// sizes. The producer keeps at most half a queue of frames outstanding, so
// that nothing is dropped.
func BenchmarkTransmitter(b *testing.B) {
	for _, batch := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			h := &countingHandler{called: make(chan struct{}, 1)}
			addr := serve(b, serverConfig(), h)
			cfg := transmitterConfig([]string{addr})
			cfg.BatchFrames = batch
			cfg.QueueFrames = 4 * 1024
			tr := newTransmitter(b, cfg)

			const chunk = 64
			frames := make([]channel.Frame, chunk)
			for i := range frames {
				frames[i] = channel.Frame{From: testFrom, To: testTo, Seq: uint64(i + 1), Ack: 1, Payload: make([]byte, 100)}
			}
			window := int64(cfg.QueueFrames / 2)
			b.ResetTimer()
			sent := int64(0)
			for sent < int64(b.N) {
				for sent-h.frames.Load() > window {
					<-h.called
				}
				n := min(int64(chunk), int64(b.N)-sent)
				if err := tr.Send(testTo, frames[:n]); err != nil {
					b.Fatal(err)
				}
				sent += n
			}
			for h.frames.Load() < int64(b.N) {
				<-h.called
			}
			b.StopTimer()
			if s := tr.Stats(); s.Drops != 0 {
				b.Fatalf("%d frames dropped", s.Drops)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "frames/s")
		})
	}
}
