{#-
    One row per server instance, in the partition of the day it was first seen (over the whole
    lake, so an instance first seen on D is D's row however the days are built): whether it is a
    cold start (see int_instances: first seen more than cold_start_lookback_minutes after the
    lake's first request), and its first cold_start_requests requests' median latency relative to
    its models' steady latency (int_instance_requests), flagged above cold_start_ratio.
-#}
with

instances as (

    select * from {{ ref('int_instances') }}
    where {{ in_build_days('event_date') }}

),

final as (

    select
        event_date,
        server,
        server_instance,
        first_seen_at,
        previous_instance,
        is_cold_start,
        warmup_latencies as warmup_requests,
        warmup_latency_ms,
        warmup_relative_latency as warmup_latency_ratio,
        coalesce(is_cold_start and warmup_relative_latency > {{ var('cold_start_ratio') }}, false) as is_slow_start,
        cast({{ var('cold_start_requests') }} as bigint) as cold_start_requests,
        cast({{ var('cold_start_ratio') }} as double) as threshold_ratio

    from instances

)

select * from final
