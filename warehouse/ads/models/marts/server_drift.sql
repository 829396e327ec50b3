{#-
    One row per server instance, in the partition of the day it was first seen: the least-squares
    slope of its steady requests' log relative latency (after its first cold_start_requests) against
    the tokens it had processed (int_instances), and the increase that line predicts over its life
    (from its start, at zero tokens, to all the tokens it processed: exp(slope × tokens) - 1, a
    growth in log space being a factor), flagged beyond drift_threshold when at least
    drift_min_requests latencies back it. For a flagged instance, the next instance of the same
    server (by first request) recovered when its steady relative latency is at most
    drift_recovery_factor × the drifting instance's start. A row covers the instance's life in the
    lake when its day is built: an instance still running then is extended by building the day again.
-#}
with

instances as (

    select * from {{ ref('int_instances') }}

),

predictions as (

    select
        *,
        exp(slope_per_million_tokens * tokens_processed / 1000000) - 1 as predicted_increase

    from instances

),

fits as (

    select
        *,
        coalesce(
            steady_latencies >= {{ var('drift_min_requests') }} and predicted_increase > {{ var('drift_threshold') }},
            false
        ) as is_drifting

    from predictions

),

final as (

    select
        fits.event_date,
        fits.server,
        fits.server_instance,
        fits.first_seen_at,
        fits.last_seen_at,
        fits.requests,
        fits.tokens_processed,
        fits.steady_latencies as steady_requests,
        fits.slope_per_million_tokens,
        fits.start_relative_latency,
        fits.predicted_increase,
        fits.is_drifting,
        fits.next_instance,
        next_instances.steady_relative_latency as next_instance_relative_latency,
        case when fits.is_drifting and fits.next_instance is not null then
            coalesce(
                next_instances.steady_relative_latency
                    <= {{ var('drift_recovery_factor') }} * fits.start_relative_latency,
                false
            )
        end as is_recovered,
        cast({{ var('drift_threshold') }} as double) as threshold_increase

    from fits
    left join instances as next_instances
        on fits.server = next_instances.server
        and fits.next_instance = next_instances.server_instance
    where {{ in_build_days('fits.event_date') }}

)

select * from final
