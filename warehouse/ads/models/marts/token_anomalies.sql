{#-
    A tenant's day whose tokens per request (input + output) jump while its requests do not: the
    prompts or answers grew (a template change, a runaway agent), not the traffic. Each day is set
    against the tenant's trailing baseline, the medians of its daily values over the 7 days before
    it (those with traffic, at least token_anomaly_min_days of them, else no baseline), read from
    DWD whether or not those days are being built. Model calls only, as tenant_daily counts them. Flagged when tokens per request are at least
    token_anomaly_multiple × their median while requests stay within token_anomaly_request_band
    of theirs, on a day of at least token_anomaly_min_requests requests.
-#}
{%- set multiple = var('token_anomaly_multiple') -%}
{%- set band = var('token_anomaly_request_band') -%}
{%- set min_days = var('token_anomaly_min_days') -%}
{%- set min_requests = var('token_anomaly_min_requests') -%}

with

requests as (

    select * from {{ ref('int_model_calls') }}
    where {{ in_build_days('event_date', days_before=7) }}

),

tenant_days as (

    select
        event_date,
        tenant_id,
        count(*) as requests,
        (coalesce(sum(input_tokens), 0) + coalesce(sum(output_tokens), 0)) / count(*) as tokens_per_request

    from requests
    group by event_date, tenant_id

),

baselines as (

    select
        built.event_date,
        built.tenant_id,
        count(before.event_date) as baseline_days,
        median(before.requests) as median_requests,
        median(before.tokens_per_request) as median_tokens_per_request

    from tenant_days as built
    left join tenant_days as before
        on built.tenant_id = before.tenant_id
        and before.event_date >= built.event_date - 7
        and before.event_date < built.event_date
    where {{ in_build_days('built.event_date') }}
    group by built.event_date, built.tenant_id

),

medians as (

    select
        tenant_days.event_date,
        tenant_days.tenant_id,
        tenant_days.requests,
        tenant_days.tokens_per_request,
        baselines.baseline_days,
        if(baselines.baseline_days >= {{ min_days }}, baselines.median_requests, null) as median_requests,
        if(baselines.baseline_days >= {{ min_days }}, baselines.median_tokens_per_request, null)
            as median_tokens_per_request

    from tenant_days
    inner join baselines
        on tenant_days.event_date = baselines.event_date
        and tenant_days.tenant_id = baselines.tenant_id

),

ratios as (

    select
        *,
        requests / median_requests as request_ratio,
        tokens_per_request / nullif(median_tokens_per_request, 0) as token_ratio

    from medians

),

final as (

    select
        *,
        coalesce(
            requests >= {{ min_requests }}
            and token_ratio >= {{ multiple }}
            and abs(request_ratio - 1) <= {{ band }},
            false
        ) as is_flagged

    from ratios

)

select * from final
