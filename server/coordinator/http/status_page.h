// The status page served at / (plain HTML, CSS and JS, no CDN: nothing
// outside the machine may be reachable). It fetches /v1/status
// (status_json.h) every second and draws: the workers as a grid of cards with
// health and load; each model's state and mesh ("data=2, model=4"); for the
// chosen model (click a row, or /#model=NAME) each param's sharding as a
// coloured SVG device grid laid out as jax.debug.visualize_array_sharding
// lays it out (tile sizes follow the shard extents, labels "CPU 0,1", one
// colour per device set); for the models that generate text, their running
// and waiting sequences, tokens generated, time to first token and
// inter-token latency (mean, p50, p99) and KV cache bytes used of capacity
// (the "text_generation" of status_json.h; the section is hidden when no
// model generates); and the recent requests with their latency.
//
// Thread-safety: returns a constant.
#ifndef MESHSERVE_SERVER_COORDINATOR_HTTP_STATUS_PAGE_H_
#define MESHSERVE_SERVER_COORDINATOR_HTTP_STATUS_PAGE_H_

#include "absl/strings/string_view.h"

namespace meshserve {

absl::string_view StatusPageHtml();

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_HTTP_STATUS_PAGE_H_
