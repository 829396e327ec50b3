{#-
    Every request a known server instance served, over the whole lake (an instance's life spans
    days, and whether it is new is judged against all of them): its number in the instance's life,
    the tokens the instance processed before it, and, for a successful model call, its latency
    relative to the model's median in the same hour across the fleet, leaving out every instance's
    first cold_start_requests requests. Relative to the model, because models differ in latency;
    to the hour, because load (and with it queueing) follows the day; to the fleet rather than the
    server, because a server runs one instance at a time, so its own latency during a warm-up or a
    drift is that instance's.
-#}
{{ config(materialized='table') }}
{%- set warmup_requests = var('cold_start_requests') -%}

with

requests as (

    select
        request_id,
        server,
        server_instance,
        model,
        requested_at,
        date_trunc('hour', requested_at) as hour_start,
        coalesce(input_tokens, 0) + coalesce(output_tokens, 0) as tokens,
        -- Latency is that of successful model calls (a tool or agent call has no model).
        case when status_code < 400 and model is not null then duration_ms end as latency_ms

    from {{ ref('stg_dwd__requests') }}
    where server is not null and server_instance is not null

),

numbered as (

    select
        *,
        row_number() over instance_life as instance_request_number,
        cast(sum(tokens) over instance_life - tokens as bigint) as tokens_before

    from requests
    window instance_life as (
        partition by server, server_instance
        order by requested_at, request_id
        rows between unbounded preceding and current row
    )

),

hourly_baselines as (

    select
        model,
        hour_start,
        quantile_cont(latency_ms, 0.5) as baseline_latency_ms

    from numbered
    where instance_request_number > {{ warmup_requests }} and latency_ms is not null
    group by model, hour_start

),

final as (

    select
        numbered.request_id,
        numbered.server,
        numbered.server_instance,
        numbered.model,
        numbered.requested_at,
        numbered.instance_request_number,
        numbered.instance_request_number <= {{ warmup_requests }} as is_warmup,
        numbered.tokens,
        numbered.tokens_before,
        numbered.latency_ms,
        numbered.latency_ms / nullif(hourly_baselines.baseline_latency_ms, 0) as relative_latency

    from numbered
    left join hourly_baselines
        on numbered.model = hourly_baselines.model
        and numbered.hour_start = hourly_baselines.hour_start

)

select * from final
