{#-
    Capacity per day and model, from the day's requests (by start) of calls to a model: the mean
    rate, the peak rate over whole UTC minutes and over the busiest 10 consecutive whole minutes,
    the measured peak concurrency (a request is in flight from its start to start + duration; at
    one instant an end comes before a start), Little's law beside it, and the replicas the peak
    needs at capacity_instance_concurrency requests per instance with capacity_headroom spare.
    A window's traffic is the day's requests that start in it; among equal peaks the earliest wins.
-#}
{%- set instance_concurrency = var('capacity_instance_concurrency') -%}
{%- set headroom = var('capacity_headroom') -%}

with

requests as (

    select * from {{ ref('int_model_calls') }}
    where {{ in_build_days('event_date') }}

),

daily as (

    select
        event_date,
        model,
        count(*) as requests,
        {{ exact_mean('duration_ms', 'status_code < 400') }} as mean_latency_ms,
        count(distinct server_instance) as instances_active

    from requests
    group by event_date, model

),

per_minute as (

    select
        event_date,
        model,
        date_trunc('minute', requested_at) as minute_start,
        count(*) as requests

    from requests
    group by event_date, model, minute_start

),

ten_minute_windows as (

    -- A busiest window starts at a minute with traffic: one starting earlier, in empty minutes, holds no more.
    select
        event_date,
        model,
        minute_start,
        sum(requests) over (
            partition by event_date, model
            order by minute_start
            range between current row and interval 9 minutes following
        ) as requests

    from per_minute

),

peak_minute as (

    select event_date, model, minute_start as peak_1m_start, requests as peak_1m_requests
    from per_minute
    qualify row_number() over (partition by event_date, model order by requests desc, minute_start) = 1

),

peak_ten_minutes as (

    select event_date, model, minute_start as peak_10m_start, requests as peak_10m_requests
    from ten_minute_windows
    qualify row_number() over (partition by event_date, model order by requests desc, minute_start) = 1

),

flight_events as (

    select event_date, model, requested_at as event_at, 1 as change
    from requests
    where duration_ms is not null

    union all

    select event_date, model, requested_at + to_microseconds(cast(round(duration_ms * 1000) as bigint)) as event_at, -1 as change
    from requests
    where duration_ms is not null

),

in_flight as (

    -- Ends (-1) before starts (+1) at one instant; within each, the order does not change the peak.
    select
        event_date,
        model,
        event_at,
        sum(change) over (
            partition by event_date, model
            order by event_at, change
            rows between unbounded preceding and current row
        ) as in_flight

    from flight_events

),

peak_concurrency as (

    select event_date, model, in_flight as peak_concurrency, event_at as peak_concurrency_at
    from in_flight
    qualify row_number() over (partition by event_date, model order by in_flight desc, event_at) = 1

),

final as (

    select
        daily.event_date,
        daily.model,
        daily.requests,
        daily.requests / 86400 as mean_qps,
        peak_minute.peak_1m_requests / 60 as peak_qps_1m,
        peak_minute.peak_1m_start,
        peak_ten_minutes.peak_10m_requests / 600 as peak_qps_10m,
        peak_ten_minutes.peak_10m_start,
        cast(coalesce(peak_concurrency.peak_concurrency, 0) as bigint) as peak_concurrency,
        peak_concurrency.peak_concurrency_at,
        daily.mean_latency_ms,
        peak_minute.peak_1m_requests / 60 * daily.mean_latency_ms / 1000 as littles_law_concurrency,
        daily.instances_active,
        coalesce(peak_concurrency.peak_concurrency, 0) / nullif(daily.instances_active, 0)
            as peak_concurrency_per_instance,
        cast({{ instance_concurrency }} as bigint) as instance_concurrency,
        cast({{ headroom }} as double) as headroom,
        cast(ceil(
            coalesce(peak_concurrency.peak_concurrency, 0) * (1 + {{ headroom }}) / {{ instance_concurrency }}
        ) as bigint) as replicas_needed

    from daily
    inner join peak_minute using (event_date, model)
    inner join peak_ten_minutes using (event_date, model)
    left join peak_concurrency using (event_date, model)

)

select * from final
