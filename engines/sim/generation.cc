#include "engines/sim/generation.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "engines/sim/kv_pull.h"
#include "engines/sim/sim_tokenizer.h"
#include "engines/sim/text_gen.h"

namespace narwhal::sim {
namespace {

constexpr absl::Duration kPullTimeout = absl::Seconds(5);

absl::Duration Millis(double ms) {
  return ms > 0 ? absl::Microseconds(static_cast<int64_t>(ms * 1000)) : absl::ZeroDuration();
}

}  // namespace

Generation::Generation(EngineState& state, InferenceRequest request, std::string request_id,
                       std::optional<FaultRule> fault, uint64_t seq, Waiter waiter)
    : state_(state),
      request_(std::move(request)),
      fault_(std::move(fault)),
      seq_(seq),
      waiter_(waiter),
      generated_ids_(GenerateIds(request_.prompt_ids, request_.max_tokens)) {
  ctx_.api = request_.api;
  ctx_.id = absl::StrCat(request_.api == Api::kChat ? "chatcmpl-" : "cmpl-", request_id);
  ctx_.created = absl::ToUnixSeconds(absl::Now());
  ctx_.model = request_.model;
  ctx_.system_fingerprint = state_.fingerprint;
  state_.running.fetch_add(1);
}

Generation::~Generation() {
  state_.running.fetch_sub(1);
  // Nothing ended the exchange: the response was never written (the client
  // left before the headers went out).
  End(state_.stopping.HasBeenNotified() ? RequestEnd::kStopped : RequestEnd::kClientGone);
}

void Generation::End(RequestEnd end) { state_.requests.End(seq_, end, NowSeconds()); }

void Generation::EndAfterWait(WaitEnd how) {
  End(how == WaitEnd::kStopped ? RequestEnd::kStopped : RequestEnd::kClientGone);
}

void Generation::SetStatus(int status) {
  state_.requests.Update(seq_, [status](RequestRecord& r) { r.status = status; });
}

void Generation::CountToken() {
  const int sent = ++tokens_sent_;
  state_.requests.Update(seq_, [sent](RequestRecord& r) { r.tokens_sent = sent; });
}

Usage Generation::MakeUsage(int completion_tokens) const {
  Usage usage{request_.prompt_tokens, completion_tokens};
  if (state_.prefix_cache.enabled() || state_.options.prompt_tokens_details) {
    usage.cached_tokens = cached_tokens_;
  }
  return usage;
}

absl::Duration Generation::TokenInterval() const {
  if (Is(FaultKind::kSlowTokens)) return absl::Milliseconds(fault_->ms);
  return Millis(state_.options.token_interval_ms);
}

Generation::Prelude Generation::RunPrelude() {
  auto interrupted = [](WaitEnd how) {
    return how == WaitEnd::kStopped ? Prelude::kStopped : Prelude::kClientGone;
  };
  if (request_.kv.kind == KvParams::Kind::kConsumer && Is(FaultKind::kRecompute)) {
    // The transfer failed and the prompt is computed here (vLLM's
    // kv_load_failure_policy "recompute"): nothing is pulled, so the
    // producer keeps the blocks until its lease ends.
    state_.failed_transfers.fetch_add(1);
    state_.log.Warning(absl::StrCat("KV load failed for ", ctx_.id, " (handoff from ",
                                    request_.kv.remote_engine_id,
                                    "): recompute fault; computing the prompt locally"));
  } else if (request_.kv.kind == KvParams::Kind::kConsumer) {
    const WaitEnd how = waiter_.Sleep(Millis(state_.options.kv_transfer_ms));
    if (how != WaitEnd::kElapsed) return interrupted(how);
    const PullReply reply = PullHandoff(request_.kv, state_.options, ctx_.id, kPullTimeout);
    if (reply.ok) {
      // vLLM counts the pulled tokens as cached, all but the last one,
      // which it recomputes.
      cached_tokens_ = std::max(0, request_.prompt_tokens - 1);
      // The pulled blocks are cached here now, as vLLM's consumer caches
      // them (and publishes them) once the pull completes.
      state_.prefix_cache.StoreBlocks(request_.prompt_ids);
      return Prelude::kReady;
    }
    state_.failed_transfers.fetch_add(1);
    state_.log.Warning(absl::StrCat("KV load failed for ", ctx_.id, " (handoff from ",
                                    request_.kv.remote_engine_id, "): ", reply.detail, "; policy ",
                                    PolicyName(state_.options.kv_load_failure_policy)));
    if (state_.options.kv_load_failure_policy == KvLoadFailurePolicy::kFail) {
      return Prelude::kLoadFailed;
    }
  } else if (request_.kv.kind == KvParams::Kind::kConsumerIncomplete) {
    state_.log.Warning(absl::StrCat("Got invalid KVTransferParams for ", ctx_.id,
                                    " (missing or invalid: ", request_.kv.missing,
                                    "); computing the prompt locally"));
  }
  // Only what the prefix cache does not hold is computed.
  cached_tokens_ = state_.prefix_cache.LookupAndStore(request_.prompt_ids, request_.prompt_tokens);
  const double prefill_ms =
      state_.options.prefill_ms_per_1k_tokens * (request_.prompt_tokens - cached_tokens_) / 1000.0;
  const WaitEnd how = waiter_.Sleep(state_.prefill_lanes.Book(absl::Now(), Millis(prefill_ms)));
  if (how != WaitEnd::kElapsed) return interrupted(how);
  return Prelude::kReady;
}

bool Generation::Silence() {
  const WaitEnd how = waiter_.Sleep(Millis(state_.options.max_silence_s * 1000.0));
  if (how == WaitEnd::kElapsed) {
    End(RequestEnd::kFault);
  } else {
    EndAfterWait(how);
  }
  return false;
}

void Generation::MakeTextInvalid(std::string* event) const {
  // The mark is a control character, which the JSON writer escapes.
  const size_t at = event->find("\\u0001");
  if (at == std::string::npos) return;
  event->replace(at, 6, fault_->type == "lone_surrogate" ? "\\udcff" : "\xff");
}

bool Generation::Write(httplib::DataSink& sink, const std::string& data) {
  if (sink.write(data.data(), data.size())) return true;
  EndAfterWait(state_.stopping.HasBeenNotified() ? WaitEnd::kStopped : WaitEnd::kClientGone);
  return false;
}

OrderedJson Generation::Descriptor() {
  const KvEntry entry =
      state_.kv.Hold(absl::StrCat(ctx_.id, "-", RandomHex(8)), request_.prompt_tokens);
  OrderedJson blocks = OrderedJson::array();
  blocks.push_back(entry.block_ids);
  if (Is(FaultKind::kMalformedBlockIds)) {
    if (fault_->block_ids.has_value()) {
      blocks = OrderedJson::parse(Dump(*fault_->block_ids));
    } else {
      blocks = OrderedJson::array();
      blocks.push_back(OrderedJson::array({entry.block_ids.front(), "x"}));
    }
  }
  OrderedJson descriptor = {{"do_remote_prefill", true},
                            {"do_remote_decode", false},
                            {"remote_block_ids", std::move(blocks)},
                            {"remote_engine_id", state_.options.engine_id},
                            {"remote_request_id", entry.remote_request_id},
                            {"remote_host", state_.advertised_host},
                            {"remote_port", state_.port.load()},
                            {"tp_size", 1},
                            {"dcp_size", 1},
                            {"pp_size", 1},
                            {"remote_num_tokens", request_.prompt_tokens},
                            {"remote_blocks_expiry_time", nullptr},
                            {"transfer_mode", "pull"}};
  if (Is(FaultKind::kDescriptorWithoutEngineId)) {
    descriptor.erase("remote_engine_id");
  }
  return descriptor;
}

bool Generation::Respond(httplib::Response& res) {
  if (Is(FaultKind::kSilentBeforeFirstToken) || Is(FaultKind::kMetadataThenSilence) ||
      Is(FaultKind::kStallAfterTokens)) {
    return Silence();
  }
  switch (RunPrelude()) {
    case Prelude::kClientGone:
      End(RequestEnd::kClientGone);
      return false;
    case Prelude::kStopped:
      End(RequestEnd::kStopped);
      return false;
    case Prelude::kLoadFailed:
      res.status = 500;
      res.set_content(
          ErrorBody({500, "InternalServerError", "Internal server error", std::nullopt}),
          "application/json");
      SetStatus(500);
      End(RequestEnd::kError);
      return true;
    case Prelude::kReady:
      break;
  }
  if (Is(FaultKind::kCloseBeforeDone)) {
    End(RequestEnd::kFault);
    return false;
  }
  const int count = Is(FaultKind::kDoneBeforeToken) ? 0 : request_.max_tokens;
  if (count > 1) {
    const WaitEnd how = waiter_.Sleep(TokenInterval() * (count - 1));
    if (how != WaitEnd::kElapsed) {
      EndAfterWait(how);
      return false;
    }
  }
  if (Is(FaultKind::kErrorInStream)) {
    const nlohmann::json& code = fault_->code;
    const int status =
        code.is_number_integer() && code.get<int64_t>() >= 100 && code.get<int64_t>() <= 599
            ? code.get<int>()
            : 500;
    ApiError error{status, fault_->type.empty() ? ErrorTypeForStatus(status) : fault_->type,
                   fault_->message.empty() ? "Internal server error" : fault_->message,
                   std::nullopt};
    res.status = status;
    res.set_content(ErrorBody(error), "application/json");
    SetStatus(status);
    End(RequestEnd::kFault);
    return true;
  }
  OrderedJson kv_transfer_params = nullptr;
  if (request_.kv.kind == KvParams::Kind::kProducer && !Is(FaultKind::kNoDescriptor)) {
    kv_transfer_params = Descriptor();
  }
  const std::vector<uint32_t> generated = Generated(count);
  TokenIds ids;
  if (request_.return_token_ids) {
    ids.prompt = request_.prompt_ids;
    ids.generated = generated;
  }
  const OrderedJson body = FullBody(ctx_, TokensText(generated), count == 0 ? "stop" : "length",
                                    MakeUsage(count), kv_transfer_params, ids);
  res.status = 200;
  res.set_content(Dump(body), "application/json");
  SetStatus(200);
  state_.requests.Update(seq_, [count](RequestRecord& r) { r.tokens_sent = count; });
  if (!Is(FaultKind::kDoneBeforeToken)) CacheGenerated(count);
  End(Is(FaultKind::kDoneBeforeToken) ? RequestEnd::kFault : RequestEnd::kComplete);
  return true;
}

void Generation::CacheGenerated(int count) {
  // vLLM caches every full block it computed, the generated tokens' too: a
  // conversation's next turn finds the reply cached where it was decoded. A
  // producer's one-token prefill fills no block of its own.
  if (request_.kv.kind == KvParams::Kind::kProducer || count <= 0) return;
  const std::vector<uint32_t> generated = Generated(count);
  // A text prompt's next turn sends the reply back as text: the ids cached
  // are those of the prompt and reply texts. A token-id prompt is continued
  // with the generated ids themselves.
  if (!request_.token_id_prompt) {
    state_.prefix_cache.StoreBlocks(SimTokenize(request_.prompt + TokensText(generated)));
    return;
  }
  std::vector<uint32_t> ids = request_.prompt_ids;
  ids.insert(ids.end(), generated.begin(), generated.end());
  state_.prefix_cache.StoreBlocks(ids);
}

std::vector<uint32_t> Generation::Generated(int count) const {
  const size_t n = std::min(static_cast<size_t>(std::max(count, 0)), generated_ids_.size());
  return std::vector<uint32_t>(generated_ids_.begin(),
                               generated_ids_.begin() + static_cast<std::ptrdiff_t>(n));
}

TokenIds Generation::ChunkIds(std::optional<uint32_t> generated) {
  TokenIds ids;
  if (!request_.return_token_ids) return ids;
  if (!prompt_ids_sent_) {
    ids.prompt = request_.prompt_ids;
    prompt_ids_sent_ = true;
  }
  if (generated.has_value()) ids.generated = std::vector<uint32_t>{*generated};
  return ids;
}

bool Generation::Stream(httplib::DataSink& sink) {
  if (Is(FaultKind::kSilentBeforeFirstToken)) return Silence();
  switch (RunPrelude()) {
    case Prelude::kClientGone:
      End(RequestEnd::kClientGone);
      return false;
    case Prelude::kStopped:
      End(RequestEnd::kStopped);
      return false;
    case Prelude::kLoadFailed:
      if (!Write(sink, ErrorFrame("Internal server error", "InternalServerError", 500)) ||
          !Write(sink, DoneEvent())) {
        return false;
      }
      End(RequestEnd::kError);
      return true;
    case Prelude::kReady:
      break;
  }
  const bool chat = request_.api == Api::kChat;
  const absl::Duration interval = TokenInterval();

  if (Is(FaultKind::kMetadataThenSilence)) {
    for (int i = 0; i < fault_->count; ++i) {
      if (i > 0) {
        const WaitEnd how = waiter_.Sleep(interval);
        if (how != WaitEnd::kElapsed) {
          EndAfterWait(how);
          return false;
        }
      }
      if (!Write(sink, SseEvent(MetadataChunk(ctx_, ChunkIds(std::nullopt))))) return false;
    }
    return Silence();
  }
  if (Is(FaultKind::kDoneBeforeToken)) {
    if (chat && !Write(sink, SseEvent(RoleChunk(ctx_, ChunkIds(std::nullopt))))) return false;
    if (!Write(sink, DoneEvent())) return false;
    End(RequestEnd::kFault);
    return true;
  }

  const int limit = request_.max_tokens;
  int to_send = limit;
  if (Is(FaultKind::kStallAfterTokens) || Is(FaultKind::kCloseBeforeDone) ||
      Is(FaultKind::kErrorInStream)) {
    to_send = std::min(fault_->count, limit);
  }
  if (chat && (to_send > 0 || !Is(FaultKind::kErrorInStream))) {
    if (!Write(sink, SseEvent(RoleChunk(ctx_, ChunkIds(std::nullopt))))) return false;
  }
  // Tokens follow a fixed schedule, so wait overshoots do not accumulate.
  absl::Time next_token = absl::Now();
  for (int i = 0; i < to_send; ++i) {
    if (i > 0) {
      next_token += interval;
      const WaitEnd how = waiter_.Sleep(next_token - absl::Now());
      if (how != WaitEnd::kElapsed) {
        EndAfterWait(how);
        return false;
      }
    }
    std::optional<std::string> finish;
    if (i == limit - 1) finish = "length";
    std::optional<Usage> usage;
    if (request_.continuous_usage) usage = MakeUsage(i + 1);
    const bool invalid = Is(FaultKind::kInvalidText) && i == fault_->count;
    const uint32_t id = generated_ids_[static_cast<size_t>(i)];
    std::string event = SseEvent(TokenChunk(ctx_, TokenText(id) + (invalid ? kInvalidMark : ""),
                                            finish, usage, ChunkIds(id)));
    if (invalid) MakeTextInvalid(&event);
    if (!Write(sink, event)) return false;
    CountToken();
  }

  if (Is(FaultKind::kStallAfterTokens)) return Silence();
  if (Is(FaultKind::kCloseBeforeDone)) {
    End(RequestEnd::kFault);
    return true;
  }
  if (Is(FaultKind::kErrorInStream)) {
    const int64_t code = fault_->code.is_number_integer() ? fault_->code.get<int64_t>() : 500;
    const std::string type =
        !fault_->type.empty()
            ? fault_->type
            : ErrorTypeForStatus(code >= 100 && code <= 599 ? static_cast<int>(code) : 500);
    const std::string message = fault_->message.empty() ? "Internal server error" : fault_->message;
    if (!Write(sink, ErrorFrame(message, type, fault_->code)) || !Write(sink, DoneEvent())) {
      return false;
    }
    End(RequestEnd::kFault);
    return true;
  }
  if (request_.include_usage && !Write(sink, SseEvent(UsageChunk(ctx_, MakeUsage(tokens_sent_))))) {
    return false;
  }
  if (!Write(sink, DoneEvent())) return false;
  CacheGenerated(tokens_sent_);
  End(RequestEnd::kComplete);
  return true;
}

}  // namespace narwhal::sim
