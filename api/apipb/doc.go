// Package apipb holds the protobuf messages and the gRPC service of FlexKV's
// client API (DESIGN 7), generated from kv.proto by gen.sh. It imports no
// hand-written package: the conversions between its messages and the types
// of packages txn and partition are package api.
//
// # Status codes
//
// The service's contract, for every method:
//   - codes.InvalidArgument: bad input; the message names the problem.
//   - codes.Unavailable: the replica is not its group's leader, or the group
//     has no leader. The trailer metadata LeaderTrailer holds the leader's
//     gRPC address (host:port), or is empty when the replica knows none.
//     Also the usual transport failures.
//   - codes.ResourceExhausted: admission control (a full outbox, a full
//     session table) refused the request; retry later with the same id.
//   - codes.FailedPrecondition: the request went to the wrong group (the
//     message names the right one), or its session expired: the message
//     contains SessionExpiredText, or the client computed other
//     destinations than the server (TxnRequest.destination_groups): the
//     message contains DestinationsDifferText; the request did not run.
//     Or, for Await and a retried write, its result was acknowledged (the
//     message contains ResultAcknowledgedText): its session sent a later
//     request to the group, which deleted the result.
//     Or the entry group has ended the epoch the request was routed with
//     (TxnRequest.epoch; DESIGN 14): the message contains EpochChangedText
//     and the trailer EpochTrailer holds the new epoch; the request did
//     not run: fetch the topology and resubmit it as a new request.
//   - codes.DeadlineExceeded, codes.Canceled: the caller's context ended.
//
// An aborted transaction is a normal answer: PieceResult.Aborted gives the
// reason.
//
// # Transaction ids
//
// A request carries (client_id, seq), and so do an Await and a piece's
// result: the numbers are the id on the wire. People read it spelt
// "c<client_id>.<seq>", as multicast.MsgID.String spells it in messages;
// the string fields AwaitRequest.id and PieceResult.id, in that form, are
// deprecated, still accepted and set for older clients. client_id is a
// session the client opened at the group (OpenSession; see kv.proto for the
// contract). The
// server keeps one outstanding request per session: the same id sent again
// returns the first result, and a later seq accepted for a session makes the
// earlier ones duplicates.
package apipb

// LeaderTrailer is the trailer metadata key of an Unavailable status: the
// gRPC address of the group's leader, or empty when unknown.
const LeaderTrailer = "flexkv-leader"

// SessionExpiredText is in the message of the FailedPrecondition status of a
// request whose session the group does not know (expired, or never opened
// there): the request did not run.
const SessionExpiredText = "session expired"

// EpochChangedText is in the message of the FailedPrecondition status of a
// Txn routed with an epoch its entry group has ended (DESIGN 14), and in
// the abort reason of a transaction its destinations delivered after its
// epoch ended (txn.ReasonEpochChanged). It did not run.
const EpochChangedText = "epoch changed"

// EpochTrailer is the trailer metadata key of an "epoch changed" status:
// the entry group's epoch, in decimal.
const EpochTrailer = "flexkv-epoch"

// DestinationsDifferText is in the message of the FailedPrecondition status
// of a Txn whose destination_groups are not the destinations the server
// computes for it: the client's configuration (topology, partition map) is
// not the server's. The request did not run.
const DestinationsDifferText = "destinations differ"

// ResultAcknowledgedText is in the message of the FailedPrecondition status
// of an Await, or of a retried write, whose result its group no longer
// keeps because the session acknowledged it: a later request of the
// session reached the group (see kv.proto, Results).
const ResultAcknowledgedText = "result acknowledged"

// NotRunTrailer is the trailer metadata key that a server sets, to "1", on
// the error of a write it refused before it could run: a follower that
// proposed nothing. A client whose write's session then expires knows from
// it that the attempt did not run (other refusals say so by their code:
// InvalidArgument, FailedPrecondition, ResourceExhausted).
const NotRunTrailer = "flexkv-not-run"

// DirectHeader is the metadata key by which a client says that it routes
// its requests itself, as the Go client does unless told to send everything
// to one endpoint: with DirectHeader "1", a replica that cannot serve a
// request answers the refusals and leader hints above instead of
// forwarding it to the right group's leader (DESIGN 7).
const DirectHeader = "flexkv-direct"

// LoopCutText is in the message of the FailedPrecondition status of a
// request that another replica forwarded to one that cannot serve it
// either: the two route by different configurations, and a forwarded
// request is never forwarded again. The message names both
// configurations' fingerprints; the request did not run.
const LoopCutText = "forwarding loop cut"

// UserHeader and ForwardedByHeader are the metadata keys of a call that a
// replica makes for a user: a request it forwards to another group's
// leader, or one its HTTP gateway serves. UserHeader names the user (the CN
// of the caller's client certificate), ForwardedByHeader the forwarding
// replica and its configuration's fingerprint, "GROUP/REPLICA FINGERPRINT".
// A replica takes them from a node of the cluster only, authenticated by its
// node certificate, and refuses a user's call that carries them
// (PermissionDenied), so that no user passes for another (DESIGN 13).
const (
	UserHeader        = "flexkv-user"
	ForwardedByHeader = "flexkv-forwarded-by"
)
