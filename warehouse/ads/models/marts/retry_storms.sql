{#-
    A minute is stormy when the tenant's retries of the model exceed storm_multiple × its first
    attempts in that minute, and also over the storm_window_minutes centred on it, where they
    number at least storm_min_retries. Stormy minutes less than a window apart make one storm
    window (from its first stormy minute to the end of its last), kept when its own retries
    exceed storm_multiple × its first attempts and number at least storm_min_retries.
-#}
{%- set multiple = var('storm_multiple') -%}
{%- set min_retries = var('storm_min_retries') -%}
{%- set window_minutes = var('storm_window_minutes') -%}
{%- set half_window = (window_minutes - 1) // 2 -%}

with

attempts_by_minute as (

    select * from {{ ref('int_attempts_counted_to_minute') }}

),

surrounding_counts as (

    select
        *,
        sum(retries) over surrounding_window as surrounding_retries,
        sum(first_attempts) over surrounding_window as surrounding_first_attempts

    from attempts_by_minute
    window surrounding_window as (
        partition by event_date, tenant_id, model
        order by minute_start
        range between interval {{ half_window }} minutes preceding and interval {{ half_window }} minutes following
    )

),

stormy_minutes as (

    select
        *,
        lag(minute_start) over (partition by event_date, tenant_id, model order by minute_start)
            as previous_stormy_minute

    from surrounding_counts
    where retries > {{ multiple }} * first_attempts
        and surrounding_retries >= {{ min_retries }}
        and surrounding_retries > {{ multiple }} * surrounding_first_attempts

),

numbered_windows as (

    select
        *,
        sum(case
            when previous_stormy_minute is null
                or minute_start - previous_stormy_minute > interval {{ window_minutes }} minutes then 1
            else 0
        end) over (partition by event_date, tenant_id, model order by minute_start) as window_number

    from stormy_minutes

),

storm_windows as (

    select
        event_date,
        tenant_id,
        model,
        window_number,
        min(minute_start) as window_start,
        max(minute_start) + interval 1 minute as window_end

    from numbered_windows
    group by event_date, tenant_id, model, window_number

),

window_counts as (

    select
        storm_windows.event_date,
        storm_windows.tenant_id,
        storm_windows.model,
        storm_windows.window_start,
        storm_windows.window_end,
        cast(sum(attempts_by_minute.retries) as bigint) as retries,
        cast(sum(attempts_by_minute.first_attempts) as bigint) as first_attempts,
        max(attempts_by_minute.retries) as peak_retries_per_minute

    from storm_windows
    inner join attempts_by_minute
        on storm_windows.event_date = attempts_by_minute.event_date
        and storm_windows.tenant_id = attempts_by_minute.tenant_id
        and storm_windows.model = attempts_by_minute.model
        and attempts_by_minute.minute_start >= storm_windows.window_start
        and attempts_by_minute.minute_start < storm_windows.window_end
    group by all

),

final as (

    select
        event_date,
        tenant_id,
        model,
        window_start,
        window_end,
        cast(datediff('minute', window_start, window_end) as bigint) as minutes,
        retries,
        first_attempts,
        retries / nullif(first_attempts, 0) as retry_multiple,
        peak_retries_per_minute,
        cast({{ multiple }} as double) as threshold_multiple

    from window_counts
    where retries >= {{ min_retries }}
        and retries > {{ multiple }} * first_attempts

)

select * from final
