{#-
    One row per server instance over the whole lake: when it was first and last seen, the
    instances of its server before and after it (by first request), whether it is a cold start,
    its warm-up (its first cold_start_requests requests) and its steady life after it, with the
    least-squares fit of the natural log of relative latency against the tokens it had processed (in
    millions). In log space because latencies are lognormal: a mean of ratios is pulled up by the
    slow tail (it reads ~1.5-2 for an instance at its model's median), which would inflate the fit's
    start and shrink the rise predicted from it; the mean of logs is the geometric mean, the median.

    An instance is a cold start when its first request is more than cold_start_lookback_minutes
    after the lake's first request (over every day of dwd.request): one already running when the
    lake's data begins was not started then. The fit's sums are exact decimals, so a rebuild gives
    the same slope to the last bit.
-#}
{{ config(materialized='table') }}

with

instance_requests as (

    select
        *,
        -- exact: a decimal divided is a double, whose sums would depend on the order they ran in
        cast(tokens_before / 1000000 as decimal(38, 6)) as x,
        case when relative_latency > 0 then cast(ln(relative_latency) as decimal(38, 6)) end as y

    from {{ ref('int_instance_requests') }}

),

lake_start as (

    select min(requested_at) as lake_first_request_at
    from {{ ref('stg_dwd__requests') }}

),

instance_stats as (

    select
        server,
        server_instance,
        min(requested_at) as first_seen_at,
        max(requested_at) as last_seen_at,
        count(*) as requests,
        cast(sum(tokens) as bigint) as tokens_processed,
        count(relative_latency) filter (where is_warmup) as warmup_latencies,
        quantile_cont(latency_ms, 0.5) filter (where is_warmup) as warmup_latency_ms,
        quantile_cont(relative_latency, 0.5) filter (where is_warmup) as warmup_relative_latency,
        count(y) filter (where not is_warmup) as steady_latencies,
        cast(sum(x) filter (where not is_warmup and y is not null) as double) as sum_x,
        cast(sum(y) filter (where not is_warmup) as double) as sum_y,
        cast(sum(x * y) filter (where not is_warmup) as double) as sum_xy,
        cast(sum(x * x) filter (where not is_warmup and y is not null) as double) as sum_xx

    from instance_requests
    group by server, server_instance

),

fitted as (

    select
        *,
        (steady_latencies * sum_xy - sum_x * sum_y)
            / nullif(steady_latencies * sum_xx - sum_x * sum_x, 0) as slope_per_million_tokens

    from instance_stats

),

final as (

    select
        cast(first_seen_at as date) as event_date,
        server,
        server_instance,
        first_seen_at,
        last_seen_at,
        lag(server_instance) over server_instances as previous_instance,
        lead(server_instance) over server_instances as next_instance,
        first_seen_at > lake_start.lake_first_request_at
            + to_minutes(cast({{ var('cold_start_lookback_minutes') }} as bigint)) as is_cold_start,
        requests,
        tokens_processed,
        warmup_latencies,
        warmup_latency_ms,
        warmup_relative_latency,
        steady_latencies,
        -- geometric means: exp of the mean log, and of the line's value at zero tokens
        exp(sum_y / nullif(steady_latencies, 0)) as steady_relative_latency,
        slope_per_million_tokens,
        exp((sum_y - slope_per_million_tokens * sum_x) / nullif(steady_latencies, 0)) as start_relative_latency

    from fitted
    cross join lake_start
    window server_instances as (partition by server order by first_seen_at, server_instance)

)

select * from final
